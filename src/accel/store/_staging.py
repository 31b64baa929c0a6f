"""Device tensors on their way to a file: copied to the host chunk by chunk, one ahead.

Copying a whole CUDA state to fresh pageable memory before writing costs its full
size in new host pages and a copy that nothing overlaps. Instead each chunk of a
device tensor is copied into one of :data:`SLOTS` reused (pinned, for CUDA) host
buffers, and the copy of the next chunk is queued before the current one is handed to
the writer: the copy engine fills one buffer while the CPU hashes and writes the
other. The buffers are kept between saves (:func:`lease`), so a training loop pays
for pinning them once.

The same code runs for any device, CPU included (the copy is then synchronous), which
is how the pipeline is tested on machines without a GPU.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

__all__ = ["SLOTS", "Ring", "lease"]

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
