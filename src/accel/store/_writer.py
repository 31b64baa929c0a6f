"""Writing a large file at the disk's pace: write-behind while writing, drop-behind after.

Why not write everything, then fsync: the fsync then waits for the whole file, after
the writes, with nothing overlapping it; and every save leaves its bytes in the page
cache, so the next save's writes need fresh pages. Measured on the 2-core CI machine
(a VM whose host reclaims free guest memory), fresh pages made ``write()`` alone cost
300-430 ms per 256 MiB instead of 80 ms, and back-to-back saves ran at a third of the
disk's speed (docs/benchmarks.md).

So, on Linux, :class:`StreamWriter` starts the write-back of each chunk as soon as it
is written (``sync_file_range(SYNC_FILE_RANGE_WRITE)``), waits for the chunk
:data:`WINDOW` chunks behind and drops it from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``): the dirty set stays bounded, the disk is
busy from the first chunk on, and the same few pages are reused for the whole file.
``finish()`` still fsyncs the file: that, not ``sync_file_range``, is what makes it
durable (it also writes the metadata and flushes the disk's cache).

Elsewhere (or where the filesystem refuses ``sync_file_range``) the writes are plain
and only the final fsync remains.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from typing import Any

from accel.store._trace import phase

__all__ = ["CHUNK", "WINDOW", "StreamWriter"]

CHUNK = 8 << 20
WINDOW = 4  # chunks written back in flight behind the writer: 32 MiB of dirty pages

_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4  # SYNC_FILE_RANGE_* (linux/fs.h)
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ESPIPE, errno.EOPNOTSUPP, errno.ENOTSUP}


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:  # ctypes releases the GIL during the call: other threads run while it waits
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):  # a libc without it
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_sync_file_range = _load_sync_file_range()
_drop = getattr(os, "posix_fadvise", None)


class StreamWriter:
    """Write a new file's bytes in order through ``fd``; ``finish()`` makes them durable.

    ``chunk``/``window`` are the write-behind granularity and depth (tests shrink them).
    """

    def __init__(self, fd: int, *, chunk: int = CHUNK, window: int = WINDOW) -> None:
        self.fd = fd
        self.chunk = chunk
        self.window = window
        self.written = 0
        self._started = 0  # write-back started up to here
        self._settled = 0  # written back and dropped from the cache up to here
        self._behind = _sync_file_range is not None

    def write(self, data: Any) -> None:
        """Write all of ``data`` (a buffer) at the end of the file."""
        view = memoryview(data).cast("B")
        with phase("write"):
            while view.nbytes:
                n = os.write(self.fd, view)
                view = view[n:]
                self.written += n
        if self._behind:
            with phase("writeback"):
                self._advance()

    def finish(self) -> None:
        """fsync the file (the durability point), then drop it from the page cache."""
        with phase("fsync"):
            os.fsync(self.fd)
        if self._behind and _drop is not None:
            _drop(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def _advance(self) -> None:
        while self.written - self._started >= self.chunk and self._behind:
            self._behind = self._range(self._started, self.chunk, _WRITE)
            self._started += self.chunk
        while self._started - self._settled > self.window * self.chunk and self._behind:
            self._behind = self._range(
                self._settled, self.chunk, _WAIT_BEFORE | _WRITE | _WAIT_AFTER
            )
            if self._behind and _drop is not None:
                _drop(self.fd, self._settled, self.chunk, os.POSIX_FADV_DONTNEED)
            self._settled += self.chunk

    def _range(self, offset: int, length: int, flags: int) -> bool:
        """One ``sync_file_range``; False when this file cannot have it (plain writes)."""
        assert _sync_file_range is not None
        if _sync_file_range(self.fd, offset, length, flags) == 0:
            return True
        code = ctypes.get_errno()
        if code == errno.EINTR:
            return True  # only an early start of write-back was lost; fsync still follows
        if code in _UNSUPPORTED:
            return False
        raise OSError(code, os.strerror(code))  # EIO, ENOSPC: the save must fail
