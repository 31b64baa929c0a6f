"""Tensor files: written with a checksum and fsync, read back only with verification.

Loading never unpickles anything (see :mod:`accel.store._tensorfile`); a payload that
fails its checksum or is not well formed becomes an :class:`~accel.errors.IntegrityError`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accel._fs import require_regular
from accel.errors import IntegrityError, PayloadMissing, WriteFailed, write_failed
from accel.store._hashing import FileDigest
from accel.store._tensorfile import read_tree, write_tree

__all__ = [
    "FileDigest",
    "PayloadMissing",
    "WriteFailed",
    "load_tensor_file",
    "save_tensor_file",
]


def save_tensor_file(obj: Any, path: Path) -> FileDigest:
    """Write ``obj`` (a tree of tensors and plain values) to a new file, fsynced."""
    try:
        size, checksum = write_tree(obj, path)
    except OSError as exc:
        raise write_failed(path, exc) from exc
    return FileDigest(size, checksum)


def verify_size(path: Path, expected: FileDigest) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PayloadMissing(f"{path} is missing; the checkpoint or entry is damaged") from None
    require_regular(st, path)  # a FIFO or device: refused before its size says anything
    size = st.st_size
    if size != expected.size:
        raise IntegrityError(
            f"{path} has {size} bytes, its manifest says {expected.size}; it is damaged "
            "(load another one, or delete it)"
        )


def load_tensor_file(path: Path, expected: FileDigest, map_location: Any = "cpu") -> Any:
    """The tree in ``path``, verified against ``expected`` before it is returned."""
    verify_size(path, expected)
    try:
        tree, checksum = read_tree(path, expected.size, map_location)
    except FileNotFoundError:
        raise PayloadMissing(f"{path} is missing; the checkpoint or entry is damaged") from None
    if checksum != expected.checksum:
        raise IntegrityError(
            f"{path} fails its checksum ({checksum} != {expected.checksum}); it is corrupt: "
            "load another checkpoint or delete this one"
        )
    return tree
