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
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

TMP_PREFIX = ".accel-tmp-"


@functools.lru_cache(maxsize=1)
def _file_mode() -> int:
    # mkstemp creates 0600 files; give ours the mode open() would (0666 & ~umask).
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
def atomic_open(path: Path, mode: str = "wb", *, durable: bool = True) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on clean exit it replaces ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new file, never a mix."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_open(path, "wb", durable=durable) as fh:
        fh.write(payload)


def atomic_write_json(path: Path, obj: Any, *, durable: bool = True) -> None:
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", durable=durable)


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


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
