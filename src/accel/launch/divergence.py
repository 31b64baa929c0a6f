"""Divergence: a logged metric that became NaN or infinite.

A diverged run otherwise looks healthy: it runs to the end, exits 0 and leaves
checkpoints full of NaN that the next run resumes. The launcher tails the run's
``metrics.jsonl`` (what ``Accelerator.log`` appends) and reports the first non-finite
value of each metric: :func:`first_nonfinite` decides (pure), :class:`MetricsTail`
reads the lines the file gained since the last look.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from accel._fs import read_chunks
from accel.runs.metrics import MAX_LINE, MetricPoint, parse_point

WARN = "warn"
STOP = "stop"


@dataclass(frozen=True)
class NonFinite:
    """Metric ``metric`` was ``value`` (``nan``, ``inf`` or ``-inf``) at ``step`` on ``rank``."""

    metric: str
    rank: int
    step: int | None
    value: str
    at: float | None = None

    @property
    def message(self) -> str:
        shown = {"nan": "NaN", "inf": "+inf", "-inf": "-inf"}.get(self.value, self.value)
        step = f"step {self.step}" if self.step is not None else "an unknown step"
        return f"metric {self.metric!r} became {shown} at {step} on rank {self.rank}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def first_nonfinite(points: Iterable[MetricPoint], seen: set[str]) -> list[NonFinite]:
    """The first non-finite value of each metric not in ``seen`` (which it extends)."""
    found = []
    for point in points:
        for name, value in point.values.items():
            if name in seen or math.isfinite(value):
                continue
            seen.add(name)
            text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
            found.append(NonFinite(name, point.rank, point.step, text, point.time))
    return found


class MetricsTail:
    """The whole lines a growing file gained since the last :meth:`read` (never re-read),
    a chunk at a time: a burst of logging, or a line that never ends (longer than any
    :mod:`accel.runs.metrics` reads, and skipped as it does), is never held whole."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self._skipping = False  # inside a line too long to be a metric's

    def read(self) -> list[MetricPoint]:
        return list(self.points())

    def points(self) -> Iterator[MetricPoint]:
        """:meth:`read`'s points as each chunk is read."""
        try:
            chunks = read_chunks(self.path, self._offset)
        except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
            return
        try:
            for chunk in chunks:
                self._offset += len(chunk)
                for line in self._lines(chunk):
                    point = parse_point(line)
                    if point is not None:
                        yield point
        except OSError:  # a read failed half-way: the rest is read at the next look
            return

    def _lines(self, chunk: bytes) -> list[str]:
        start = 0
        if self._skipping:
            start = chunk.find(b"\n") + 1
            if not start:
                return []
            self._skipping = False
        complete, newline, rest = chunk[start:].rpartition(b"\n")
        if newline:
            complete, self._partial = self._partial + complete, b""
        else:
            rest = self._partial + rest
        if len(rest) > MAX_LINE:
            rest, self._skipping = b"", True
        self._partial = rest
        lines = complete.decode("utf-8", errors="replace").splitlines() if newline else []
        return [line for line in lines if len(line) <= MAX_LINE]
