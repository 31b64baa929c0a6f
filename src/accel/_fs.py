"""Atomic file writes and small filesystem helpers.

Every file accel writes goes through :func:`atomic_write`: a temporary file in the
same folder, fsync, ``os.replace``, then fsync of the folder so the rename itself
survives a power loss. Nothing is ever rewritten in place.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from accel import _faults
from accel.errors import storage_error

TMP_PREFIX = ".accel-tmp-"
# Run records and logs may hold user data (commands, messages, what a script printed):
# never readable by other users, whatever the umask.
PRIVATE_MODE = 0o640


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def file_mode(mode: int = 0o666) -> int:
    """``mode`` as ``open()`` would create it (less the umask)."""
    return mode & ~_umask()


def open_private_append(path: Path) -> int:
    """A descriptor appending to ``path``, created :data:`PRIVATE_MODE`, never via a link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, flags, PRIVATE_MODE)
    except OSError as exc:
        raise storage_error(exc, "write", path) from None


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Windows and some filesystems cannot open folders.
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(
    path: Path, mode: str = "wb", *, durable: bool = True, perms: int = 0o666
) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on clean exit it replaces ``path`` atomically.

    ``perms``: the file's mode before the umask (:data:`PRIVATE_MODE` for user data).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    except OSError as exc:
        raise storage_error(exc, "write", path) from None
    try:
        os.fchmod(fd, file_mode(perms))  # mkstemp made it 0600
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise storage_error(exc, "write", path) from None
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write(
    path: Path, data: bytes | str, *, durable: bool = True, perms: int = 0o666
) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new file, never a mix."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_open(path, "wb", durable=durable, perms=perms) as fh:
        fh.write(payload)


def atomic_write_json(path: Path, obj: Any, *, durable: bool = True, perms: int = 0o666) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    atomic_write(path, text, durable=durable, perms=perms)


def read_json(path: Path) -> Any:
    """The JSON document at ``path``; ValueError also for one nested beyond json's reach."""
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except RecursionError:
            raise ValueError(f"{path} is nested too deeply to be read") from None


class TreeUsage(NamedTuple):
    size: int  # bytes of regular files
    files: int
    newest: float | None  # the newest mtime, None for an empty tree


def tree_usage(path: Path) -> TreeUsage:
    """Regular files under ``path``, not following links; zeros if it is gone."""
    size = files = 0
    newest: float | None = None
    stack = [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                            continue
                        if not entry.is_file(follow_symlinks=False):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    size += st.st_size
                    files += 1
                    newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
        except OSError:
            continue
    return TreeUsage(size, files, newest)


def tree_size(path: Path) -> int:
    """Bytes of regular files under ``path``, not following links; 0 if it is gone."""
    return tree_usage(path).size


def remove_tree(path: Path, device: int | None = None, *, last: Sequence[str] = ()) -> int:
    """Remove ``path`` without following links or entering other filesystems.

    A link is removed as a link, never its target. ``device``: the filesystem to stay on
    (default: the one ``path`` is on). ``last``: names at the top of ``path`` removed
    after everything else, in that order, so that a removal killed half-way still
    carries them. Returns how many paths had to stay (mount points and what holds them).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        _unlink(path)
        _faults.point("remove.unlinked")
        return 0
    if device is not None and st.st_dev != device:
        return 1
    try:
        with os.scandir(path) as it:
            order = {name: i + 1 for i, name in enumerate(last)}
            children = sorted(it, key=lambda e: order.get(e.name, 0))
    except FileNotFoundError:
        return 0
    left = 0
    for child in children:
        left += remove_tree(Path(child.path), st.st_dev)
    if left == 0:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
        _faults.point("remove.rmdir")
    return left


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
