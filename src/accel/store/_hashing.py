"""Checksums of large payloads, computed off the critical path.

xxh3-64 hashes at memory speed (about 4x zlib.crc32 here), so verifying a checkpoint
costs little next to reading it. Writers hash each buffer as it is written; readers
hash the file in a thread while torch parses it.
xxhash releases the GIL for large buffers, so the reader's two overlap on two cores.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import xxhash

ALGORITHM = "xxh3_64"
_CHUNK = 8 << 20


def digest_bytes(data: bytes | bytearray | memoryview) -> str:
    return f"{ALGORITHM}:{xxhash.xxh3_64(data).hexdigest()}"


def hash_file(path: Path) -> tuple[str, int]:
    """(checksum, size) of the file at ``path``."""
    hasher = xxhash.xxh3_64()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            hasher.update(view[:n])
            size += n
    return f"{ALGORITHM}:{hasher.hexdigest()}", size


class HashingWriter:
    """A write-only file object that hashes what passes through it.

    Hashing happens inside ``write``: torch hands over views of buffers it may free
    or reuse as soon as ``write`` returns, so they cannot be hashed later. xxh3 runs
    at memory speed, a small cost next to the write and its fsync.
    """

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self._hasher = xxhash.xxh3_64()
        self.size = 0
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            written = int(self._fh.write(data))
        except OSError as exc:
            self.error = exc  # torch replaces it by its own RuntimeError; keep the cause
            raise
        self._hasher.update(data)
        self.size += written
        return written

    def flush(self) -> None:
        self._fh.flush()

    def checksum(self) -> str:
        return f"{ALGORITHM}:{self._hasher.hexdigest()}"


class FileHasher:
    """Hash a file in a background thread: ``start()``, do other work, ``result()``."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._result: tuple[str, int] | BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="accel-verify", daemon=True)

    def _run(self) -> None:
        try:
            self._result = hash_file(self._path)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller in result()
            self._result = exc

    def start(self) -> FileHasher:
        self._thread.start()
        return self

    def result(self) -> tuple[str, int]:
        self._thread.join()
        if isinstance(self._result, BaseException):
            raise self._result
        assert self._result is not None
        return self._result


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
