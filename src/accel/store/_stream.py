"""The streaming writer of tensor files: device bytes to the host, host bytes to the disk.

**Writing at the disk's pace** (:class:`StreamWriter`): write-behind while writing,
drop-behind after. Why not write everything, then fsync: the fsync then waits for the
whole file, after the writes, with nothing overlapping it; and every save leaves its
bytes in the page cache, so the next save's writes need fresh pages. Measured on the
2-core CI machine (a VM whose host reclaims free guest memory), fresh pages made
``write()`` alone cost 300-430 ms per 256 MiB instead of 80 ms, and back-to-back saves
ran at a third of the disk's speed (docs/benchmarks.md).

So, on Linux, :class:`StreamWriter` starts the write-back of each chunk as soon as it
is written (``sync_file_range(SYNC_FILE_RANGE_WRITE)``), waits for the chunk
:data:`WINDOW` chunks behind and drops it from the page cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``): the dirty set stays bounded, the disk is
busy from the first chunk on, and the same few pages are reused for the whole file.
``finish()`` still fsyncs the file: that, not ``sync_file_range``, is what makes it
durable (it also writes the metadata and flushes the disk's cache). Elsewhere (or
where the filesystem refuses ``sync_file_range``) the writes are plain and only the
final fsync remains.

**Device tensors on their way** (:class:`Ring`): copied to the host chunk by chunk, one
ahead. Copying a whole CUDA state to fresh pageable memory before writing costs its
full size in new host pages and a copy that nothing overlaps. Instead each chunk of a
device tensor is copied into one of :data:`SLOTS` reused (pinned, for CUDA) host
buffers, and the copy of the next chunk is queued before the current one is handed to
the writer: the copy engine fills one buffer while the CPU hashes and writes the
other. The buffers are kept between saves (:func:`lease`), so a training loop pays
for pinning them once. The same code runs for any device, CPU included (the copy is
then synchronous), which is how the pipeline is tested on machines without a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from accel.store._trace import phase

__all__ = ["CHUNK", "SLOTS", "WINDOW", "Ring", "StreamWriter", "lease"]

# -- writing at the disk's pace --------------------------------------------------------

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


# -- device tensors on their way ------------------------------------------------------

SLOTS = 2


class Ring:
    """:data:`SLOTS` host buffers of ``chunk`` bytes each (page-locked when ``pinned``)."""

    def __init__(self, chunk: int, *, pinned: bool) -> None:
        import torch

        self.chunk = chunk
        self.pinned = pinned
        self.slots = [
            torch.empty(chunk, dtype=torch.uint8, pin_memory=pinned) for _ in range(SLOTS)
        ]

    def pieces(self, tensor: Any) -> Iterator[memoryview]:
        """The bytes of the contiguous ``tensor``, in order, as views of the buffers.

        Each view is valid until the next one is asked for: the buffer it shows is
        refilled then.
        """
        import torch

        flat = tensor.reshape(-1).view(torch.uint8)
        queued: deque[tuple[Any, Any]] = deque()
        try:
            for i, start in enumerate(range(0, flat.numel(), self.chunk)):
                part = flat[start : start + self.chunk]
                queued.append(self._copy(part, self.slots[i % SLOTS]))
                if len(queued) == SLOTS:  # the newest copy runs while the oldest is written
                    yield _ready(*queued.popleft())
            while queued:
                yield _ready(*queued.popleft())
        finally:  # stopped early (a failed write): no copy may land after the ring is reused
            for pending in queued:
                _ready(*pending)

    @staticmethod
    def _copy(part: Any, slot: Any) -> tuple[Any, Any]:
        """Queue the copy of ``part`` into ``slot``: (the filled view, event or None)."""
        import torch

        view = slot[: part.numel()]
        if part.device.type != "cuda":
            view.copy_(part)
            return view, None
        with torch.cuda.device(part.device):  # the event must follow the copy's stream
            view.copy_(part, non_blocking=True)
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record()
        return view, done


def _ready(view: Any, done: Any) -> memoryview:
    if done is not None:
        done.synchronize()
    return memoryview(view.numpy())


_lock = threading.Lock()
_idle: list[Ring] = []  # rings no write is using, kept for the next save


@contextlib.contextmanager
def lease(chunk: int, *, pinned: bool) -> Iterator[Ring]:
    """A ring of this size and kind, reused from an earlier save when one is idle."""
    with _lock:
        ring = next((r for r in _idle if r.chunk == chunk and r.pinned == pinned), None)
        if ring is not None:
            _idle.remove(ring)
    if ring is None:
        ring = Ring(chunk, pinned=pinned)
    try:
        yield ring
    finally:
        with _lock:
            _idle.append(ring)
