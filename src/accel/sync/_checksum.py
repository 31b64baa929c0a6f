"""Checksums named by their algorithm (``xxh3_64:<hex>``), as the manifests write them.

Files the manifests do not cover (run logs, the config, the cache) are hashed with
xxh3-64 like checkpoints are; a checksum with another known algorithm is still verified.
A checksum read from a remote is untrusted: only the algorithms below, with a digest of
their exact length in lowercase hex, are accepted (``shake_128:...`` is refused, not a
TypeError halfway through a pull).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Protocol

from accel._fs import open_regular
from accel.errors import IntegrityError

DEFAULT_ALGORITHM = "xxh3_64"
CHUNK = 8 << 20
_XXH = ("xxh3_64", "xxh3_128", "xxh64", "xxh32")
# algorithm -> hex digits of its digest
DIGEST_HEX = {
    "xxh3_64": 16,
    "xxh3_128": 32,
    "xxh64": 16,
    "xxh32": 8,
    "sha256": 64,
    "sha512": 128,
    "blake2b": 128,
    "blake2s": 64,
}
_HEX = re.compile(r"[0-9a-f]+")


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def checksum_problem(checksum: object) -> str | None:
    """What is wrong with a checksum from outside (None: it can be verified)."""
    if not isinstance(checksum, str):
        return f"a checksum must be text, not {type(checksum).__name__}"
    algorithm, sep, digest = checksum.partition(":")
    if not sep:
        return f"checksum {checksum[:80]!r} does not name its algorithm"
    if algorithm not in DIGEST_HEX:
        return f"unknown checksum algorithm {algorithm[:40]!r} (known: {', '.join(DIGEST_HEX)})"
    if len(digest) != DIGEST_HEX[algorithm] or not _HEX.fullmatch(digest):
        return f"{algorithm} checksum {digest[:80]!r} is not {DIGEST_HEX[algorithm]} hex digits"
    return None


def algorithm_of(checksum: str) -> str:
    problem = checksum_problem(checksum)
    if problem is not None:
        raise IntegrityError(problem)
    return checksum.partition(":")[0]


def new_hasher(algorithm: str = DEFAULT_ALGORITHM) -> Hasher:
    """A fresh hasher; :class:`IntegrityError` for an algorithm accel cannot verify."""
    if algorithm in _XXH:
        import xxhash

        return getattr(xxhash, algorithm)()  # type: ignore[no-any-return]
    if algorithm in DIGEST_HEX:
        return hashlib.new(algorithm)
    raise IntegrityError(f"unknown checksum algorithm {algorithm!r}; upgrade accel")


def format_checksum(algorithm: str, hasher: Hasher) -> str:
    return f"{algorithm}:{hasher.hexdigest()}"


def hash_file(path: Path, algorithm: str = DEFAULT_ALGORITHM) -> tuple[str, int]:
    """(checksum, size) of the regular file at ``path``: a FIFO, device or link is
    :class:`accel._fs.DamagedFile` (a ``ValueError``), never waited on."""
    hasher = new_hasher(algorithm)
    size = 0
    with os.fdopen(open_regular(path), "rb", buffering=0) as fh:
        # A buffer the size of the file, up to CHUNK: zeroing 8 MiB per small log costs more
        # than hashing it.
        buf = bytearray(max(1, min(CHUNK, os.fstat(fh.fileno()).st_size + 1)))
        view = memoryview(buf)
        while n := fh.readinto(buf):
            hasher.update(view[:n])
            size += n
    return format_checksum(algorithm, hasher), size
