"""Reading the workspace for ``accel clean``: folder listings, sizes and ages, JSON
records. Nothing here follows a symlink or crosses a mount.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from stat import S_ISREG
from typing import Any

from accel._fs import JSON_DEPTH, json_depth, open_regular, parse_json
from accel.errors import DamagedFile
from accel.store.entry import META_MAX_BYTES

__all__ = ["children", "read_json", "walk"]


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
        if not S_ISREG(os.fstat(fd).st_mode):
            open_regular(path)  # raises: a FIFO, a device, a folder
        data = os.read(fd, _CHUNK)
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
