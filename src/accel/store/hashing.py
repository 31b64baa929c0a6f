"""Checksums of payloads: xxh3-64, which hashes at memory speed.

About 4x the speed of zlib.crc32 on the machines measured, so verifying a checkpoint
costs little next to reading it (docs/benchmarks.md). xxhash releases the GIL for
large buffers, so hashing overlaps with I/O in another thread.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from accel._fs import open_regular
from accel.errors import IntegrityError

ALGORITHM = "xxh3_64"
CHUNK = 8 << 20  # bytes a read hashes at once


@dataclass(frozen=True)
class FileDigest:
    """What a manifest or a cache entry records of one payload file."""

    size: int
    checksum: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "checksum": self.checksum}


def digest_bytes(data: bytes | bytearray | memoryview) -> str:
    return f"{ALGORITHM}:{xxhash.xxh3_64(data).hexdigest()}"


def hash_file(
    path: Path,
    *,
    algorithm: str = ALGORITHM,
    progress: Callable[[int], None] | None = None,
) -> tuple[str, int]:
    """(``algorithm:hex``, size) of the regular file at ``path``: a FIFO, a device or a
    link is :class:`accel._fs.DamagedFile`, never followed or waited on. The
    one file hasher: checkpoints, the cache, ``verify`` and ``sync`` all use it.

    ``progress`` is told how many bytes each read added (``accel checkpoints verify``).
    """
    hasher = new_hasher(algorithm)
    size = 0
    with os.fdopen(open_regular(path), "rb", buffering=0) as fh:
        # A buffer the size of the file, up to a chunk: zeroing 8 MiB per small log
        # costs more than hashing it.
        buf = bytearray(max(1, min(CHUNK, os.fstat(fh.fileno()).st_size + 1)))
        view = memoryview(buf)
        while n := fh.readinto(buf):
            hasher.update(view[:n])
            size += n
            if progress is not None:
                progress(n)
    return f"{algorithm}:{hasher.hexdigest()}", size


# algorithm -> hex digits of its digest: what a checksum may name (a remote's included)
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
_XXH = ("xxh3_64", "xxh3_128", "xxh64", "xxh32")
_HEX = re.compile(r"[0-9a-f]+")
# What accel itself writes into a checkpoint manifest: xxh3-64, and nothing else (loading
# and ``verify`` hash with it, so a checksum of another form could never match).
WRITTEN = (ALGORITHM,)


def checksum_problem(checksum: object, algorithms: Collection[str] = DIGEST_HEX) -> str | None:
    """What is wrong with a recorded checksum (None: it can be verified): an allowlist.

    It must be text ``<algorithm>:<digest>``, with one of ``algorithms`` (default: every
    algorithm a remote index may name, :data:`DIGEST_HEX`; :data:`WRITTEN` for what
    accel writes itself) and a digest of that algorithm's exact length in lowercase hex.
    The one rule: the sync index reader and the manifest reader both apply it, so a
    checkpoint the store reads is never one its pushed index would refuse.
    """
    if not isinstance(checksum, str):
        return f"a checksum must be text, not {type(checksum).__name__}"
    algorithm, sep, digest = checksum.partition(":")
    if not sep:
        return f"checksum {checksum[:80]!r} does not name its algorithm"
    if algorithm not in algorithms or algorithm not in DIGEST_HEX:
        known = ", ".join(a for a in DIGEST_HEX if a in algorithms)
        return f"unknown checksum algorithm {algorithm[:40]!r} (known: {known})"
    if len(digest) != DIGEST_HEX[algorithm] or not _HEX.fullmatch(digest):
        return f"{algorithm} checksum {digest[:80]!r} is not {DIGEST_HEX[algorithm]} hex digits"
    return None


def new_hasher(algorithm: str = ALGORITHM) -> Any:
    """A fresh hasher; :class:`IntegrityError` for an algorithm accel cannot verify."""
    if algorithm in _XXH:
        return getattr(xxhash, algorithm)()
    if algorithm in DIGEST_HEX:
        import hashlib  # OpenSSL's: 4 ms of every command's start-up, for a rare algorithm

        return hashlib.new(algorithm)
    raise IntegrityError(f"unknown checksum algorithm {algorithm!r}; upgrade accel")


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
