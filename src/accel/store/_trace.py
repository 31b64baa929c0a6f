"""Timestamps of the phases of a save, for the checkpoint benchmark; off unless asked.

``with recording() as spans: ...`` collects one :class:`Span` per phase (write, hash,
writeback wait, fsync, rename, retention, ...) that the code inside runs, from every
thread. Outside it, :func:`phase` costs one global read and returns a shared no-op
context: nothing is timed, stored or printed in production.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Span", "phase", "recording"]


@dataclass(frozen=True)
class Span:
    name: str
    start: float  # time.perf_counter()
    end: float
    thread: str

    @property
    def seconds(self) -> float:
        return self.end - self.start


_sink: list[Span] | None = None
_OFF = contextlib.nullcontext()


def phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """Time the block as phase ``name`` while :func:`recording`; else do nothing."""
    return _OFF if _sink is None else _timed(name, _sink)


@contextlib.contextmanager
def _timed(name: str, sink: list[Span]) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        sink.append(Span(name, start, time.perf_counter(), threading.current_thread().name))


@contextlib.contextmanager
def recording() -> Iterator[list[Span]]:
    """Collect the spans of everything that runs inside (list.append is thread-safe)."""
    global _sink
    spans: list[Span] = []
    previous, _sink = _sink, spans
    try:
        yield spans
    finally:
        _sink = previous
