"""Reading the workspace for ``accel clean``: folder listings, sizes and ages, JSON
records. Nothing here follows a symlink or crosses a mount, but the usage of a part that
``accel status`` shows (:meth:`Tree.usage`, only of a Tree made with ``sizes``: never
clean's), which counts, as it always has, what is mounted in the part and what its folder
links to.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from stat import S_ISREG
from typing import Any

from accel._fs import JSON_DEPTH, TreeUsage, json_depth, open_regular, parse_json
from accel.errors import DamagedFile
from accel.store.entry import META_MAX_BYTES

__all__ = ["Tree", "children", "read_json", "walk"]


def children(folder: str | Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def walk(path: str | Path) -> tuple[int, float]:
    """(bytes, newest mtime) of ``path`` and what is under it; links are not followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0.0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, st.st_mtime
    total, newest, stack = 0, st.st_mtime, [str(path)]
    while stack:
        for entry in children(stack.pop()):
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            newest = max(newest, est.st_mtime)
            if stat.S_ISDIR(est.st_mode):
                if est.st_dev == st.st_dev:  # never measure across a mount
                    stack.append(entry.path)
            else:
                total += est.st_size
    return total, newest


class Tree:
    """One command's reading of the workspace's folders, each listed once.

    The clean scan asks it for listings (:meth:`children`) and for the bytes and age of
    each item (:meth:`walk`); made with ``sizes``, it keeps them, so that ``accel status``
    and ``accel env`` then measure every part (:meth:`usage`) from what the scan already
    listed and list only what the scan never enters (the files of a cache entry). Without
    ``sizes`` it keeps nothing: ``accel clean`` reads each folder once on its own.
    """

    def __init__(self, *, sizes: bool = False) -> None:
        self.sizes = sizes
        self._listed: dict[str, list[os.DirEntry[str]]] = {}
        self._walked: dict[str, tuple[int, float]] = {}
        self._usage: dict[str, TreeUsage] = {}

    def children(self, folder: str | Path) -> list[os.DirEntry[str]]:
        """As :func:`children`."""
        if not self.sizes:
            return children(folder)
        key = os.fspath(folder)
        found = self._listed.get(key)
        if found is None:
            found = self._listed[key] = children(key)
        return found

    def walk(self, path: str | Path) -> tuple[int, float]:
        """As :func:`walk`; with ``sizes``, a folder's usage is kept on the way."""
        key = os.fspath(path)
        if not self.sizes:
            return walk(key)
        found = self._walked.get(key)
        if found is not None:
            return found
        try:
            st = os.lstat(key)
        except OSError:
            return 0, 0.0
        if not stat.S_ISDIR(st.st_mode):
            return st.st_size, st.st_mtime
        return self._walk_folder(key, st)

    def _walk_folder(self, top: str, st: os.stat_result) -> tuple[int, float]:
        total, newest, stack = 0, st.st_mtime, [top]
        size = files = 0
        latest = _NONE  # the newest regular file, for the usage
        while stack:
            for entry in self._list(stack.pop()):
                try:
                    est = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if est.st_mtime > newest:
                    newest = est.st_mtime
                if stat.S_ISDIR(est.st_mode):
                    if est.st_dev == st.st_dev:  # never measure across a mount
                        stack.append(entry.path)
                        continue
                    # ...but a part's usage has always counted what is mounted in it
                    other = self._folder_usage(entry.path)
                    size, files = size + other.size, files + other.files
                    latest = max(latest, _NONE if other.newest is None else other.newest)
                    continue
                total += est.st_size
                if stat.S_ISREG(est.st_mode):
                    size, files = size + est.st_size, files + 1
                    if est.st_mtime > latest:
                        latest = est.st_mtime
        self._usage[top] = TreeUsage(size, files, None if latest == _NONE else latest)
        found = self._walked[top] = (total, newest)
        return found

    def usage(self, path: str | Path) -> TreeUsage:
        """As :func:`accel._fs.tree_usage`: regular files, links not followed below
        ``path``; what the scan walked is not listed again."""
        try:
            top = os.lstat(path)
        except OSError:
            return TreeUsage(0, 0, None)
        if stat.S_ISREG(top.st_mode):
            return TreeUsage(top.st_size, 1, top.st_mtime)
        return self._folder_usage(os.fspath(path))

    def _folder_usage(self, top: str) -> TreeUsage:
        size = files = 0
        newest = _NONE
        stack = [top]
        while stack:
            folder = stack.pop()
            known = self._usage.get(folder)
            if known is not None:  # walked by the scan, or measured already
                size, files = size + known.size, files + known.files
                newest = max(newest, _NONE if known.newest is None else known.newest)
                continue
            for entry in self._list(folder):
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                size, files = size + st.st_size, files + 1
                if st.st_mtime > newest:
                    newest = st.st_mtime
        found = TreeUsage(size, files, None if newest == _NONE else newest)
        self._usage[top] = found
        return found

    def _list(self, folder: str) -> list[os.DirEntry[str]]:
        found = self._listed.get(folder)
        return children(folder) if found is None else found


_NONE = float("-inf")  # no file seen yet: TreeUsage.newest None


_RAW_DECODE = json.JSONDecoder().raw_decode
_CHUNK = 16384
# As accel._fs.open_regular opens (inlined: this runs once per cache entry).
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def read_json(path: str) -> Any:
    """A cache entry's record, read as :func:`accel._fs.read_json` does (a regular file,
    never blocking, bounded in size and depth: :class:`~accel._fs.DamagedFile` otherwise);
    its numbers are bounded by the record's parser."""
    # The hot path of a 100,000-entry scan: raw descriptors, no text layer, and small
    # reads (os.read(fd, 1 MiB) allocates, and maps, the whole buffer every time).
    try:
        fd = os.open(path, _FLAGS)
    except OSError:
        fd = open_regular(path)  # raises what is wrong, in the one reader's words
    try:
        try:
            data = os.read(fd, _CHUNK)
        except OSError:
            data = b""  # a folder (EISDIR), a FIFO or device that would block: below
        # A record is one short read; only what is not (nothing, or a chunk's worth)
        # needs the check that it is a regular file: a FIFO, a device, a folder.
        if (not data or len(data) == _CHUNK) and not S_ISREG(os.fstat(fd).st_mode):
            open_regular(path)  # raises what is wrong, in the one reader's words
        while len(data) % _CHUNK == 0 and data:
            if len(data) > META_MAX_BYTES:
                raise DamagedFile(path, f"is larger than any record ({META_MAX_BYTES} bytes)")
            more = os.read(fd, _CHUNK)
            if not more:
                break
            data += more
    finally:
        os.close(fd)
    if data.count(b"[") + data.count(b"{") > JSON_DEPTH and json_depth(data) > JSON_DEPTH:
        return parse_json(data, path)  # names the problem
    text = data.decode("utf-8")
    try:
        value, end = _RAW_DECODE(text)
    except ValueError:
        return json.loads(text)  # leading whitespace, or the error message for the warning
    if text[end:].strip():
        raise ValueError(f"extra data after the JSON value at {end}")
    return value
