"""Checksums named by their algorithm (``xxh3_64:<hex>``), as the manifests write them.

Files the manifests do not cover (run logs, the config, the cache) are hashed with
xxh3-64 like checkpoints are; a checksum with another known algorithm is still verified.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Protocol

from accel.errors import IntegrityError

DEFAULT_ALGORITHM = "xxh3_64"
CHUNK = 8 << 20
_XXH = ("xxh3_64", "xxh3_128", "xxh64", "xxh32")


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def algorithm_of(checksum: str) -> str:
    algorithm, sep, digest = checksum.partition(":")
    if not sep or not digest:
        raise IntegrityError(f"checksum {checksum!r} does not name its algorithm")
    return algorithm


def new_hasher(algorithm: str = DEFAULT_ALGORITHM) -> Hasher:
    """A fresh hasher; :class:`IntegrityError` for an algorithm accel cannot verify."""
    if algorithm in _XXH:
        import xxhash

        return getattr(xxhash, algorithm)()  # type: ignore[no-any-return]
    if algorithm in hashlib.algorithms_available:
        return hashlib.new(algorithm)
    raise IntegrityError(f"unknown checksum algorithm {algorithm!r}; upgrade accel")


def format_checksum(algorithm: str, hasher: Hasher) -> str:
    return f"{algorithm}:{hasher.hexdigest()}"


def hash_file(path: Path, algorithm: str = DEFAULT_ALGORITHM) -> tuple[str, int]:
    """(checksum, size) of the file at ``path``."""
    hasher = new_hasher(algorithm)
    size = 0
    with open(path, "rb", buffering=0) as fh:
        # A buffer the size of the file, up to CHUNK: zeroing 8 MiB per small log costs more
        # than hashing it.
        buf = bytearray(max(1, min(CHUNK, os.fstat(fh.fileno()).st_size + 1)))
        view = memoryview(buf)
        while n := fh.readinto(buf):
            hasher.update(view[:n])
            size += n
    return format_checksum(algorithm, hasher), size
