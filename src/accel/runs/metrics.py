"""The metrics a run logged (``metrics.jsonl``): points, series, last/best, sparklines.

Each line is what ``Accelerator.log`` appends: ``{"step", "time", "rank", **metrics}``.
Reading skips torn and foreign lines (and lines longer than any it writes); only
numeric values make series. A long run's file is large: ``runs show`` summarises it as
it streams past (:class:`MetricSummary`), keeping per metric what the view shows, never
the points.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accel._fs import read_lines
from accel.layout import METRICS_FILE as METRICS_FILE  # re-exported

SPARK = "▁▂▃▄▅▆▇█"
_MAXIMISE = re.compile(
    r"acc|f1|precision|recall|auc|bleu|rouge|score|reward|iou|map\b|top\d|throughput|per_s|/s$",
)
_NO_BEST = re.compile(r"(^|[_/.])(lr|learning_rate|epoch|step|grad_norm|scale)($|[_/.])")
MAX_LINE = 1 << 20  # a line of thousands of metrics is far shorter: a longer one is damage
MAX_METRICS = 1000  # metric names a summary follows; a file with more was not a script's
# Values kept as they are, all series together (2 MiB): a series is summarised exactly
# until then, and the longest series turns into block sums when they are exceeded.
KEEP_VALUES = 1 << 18
TREND_BLOCKS = 1024  # block sums kept of a series no longer kept whole
TREND_POINTS = 480  # such a series' trend: the means of this many equal spans of it


@dataclass(frozen=True)
class MetricPoint:
    step: int | None
    time: float | None
    rank: int
    values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricView:
    """One metric of one run as ``runs show`` lists it (main rank's series).

    ``values``: the series, or of a series too long to keep, the means of
    :data:`TREND_POINTS` equal spans of it (NaN where a span has no finite value).
    """

    name: str
    count: int
    last: float
    last_step: int | None
    direction: str | None  # "min", "max" or None (no "best" for lr, epoch, ...)
    best: float | None
    best_step: int | None
    values: tuple[float, ...] = ()

    def sparkline(self, width: int = 24) -> str:
        return sparkline(self.values, width)


def parse_metrics(lines: Iterable[str]) -> list[MetricPoint]:
    return [p for p in map(parse_point, lines) if p is not None]


def parse_point(line: str) -> MetricPoint | None:
    """The point of one line; None for a torn or foreign one."""
    fields = _fields(line)
    return None if fields is None else MetricPoint(*fields)


# ``json.loads`` without its wrappers: the C scanner it ends in, and the same refusals
# (leading and trailing whitespace only; a BOM, trailing data or a torn value refused).
# A long run's file is a million lines, and the wrappers cost as much as the scan.
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]
_BLANK = " \t\n\r"


def _fields(line: str) -> tuple[int | None, float | None, int, dict[str, float]] | None:
    """``(step, time, rank, values)`` of one line; None for a torn or foreign one."""
    try:
        data, end = _scan(line, len(line) - len(line.lstrip(_BLANK)))
        if line[end:].strip(_BLANK):
            return None
    except (ValueError, RecursionError, StopIteration):  # torn, foreign, nested too deep
        return None
    if type(data) is not dict:
        return None
    step, stamp, rank = data.pop("step", None), data.pop("time", None), data.pop("rank", None)
    try:
        # JSON's numbers are exactly int and float (never bool, which is its own type)
        values = {k: float(v) for k, v in data.items() if type(v) is float or type(v) is int}
        return (
            step if type(step) is int else None,
            float(stamp) if type(stamp) is float or type(stamp) is int else None,
            rank if type(rank) is int else 0,
            values,
        )
    except OverflowError:  # a number no float holds (400 digits): not a metric
        return None


def iter_metrics(path: Path) -> Iterator[MetricPoint]:
    """The points of ``path`` as it is read, line by line; none when it cannot be read."""
    for fields in _iter_fields(path):
        yield MetricPoint(*fields)


def _iter_fields(path: Path) -> Iterator[tuple[int | None, float | None, int, dict[str, float]]]:
    try:
        lines = read_lines(path, limit=MAX_LINE)
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return
    try:
        for line in lines:
            fields = _fields(line.decode("utf-8", errors="replace"))
            if fields is not None:
                yield fields
    except OSError:  # a read failed half-way: the points before it stand
        return


def read_metric_views(path: Path) -> list[MetricView]:
    """:func:`metric_views` of the file at ``path``, in memory bounded whatever its size."""
    summary = MetricSummary()
    for step, _time, rank, values in _iter_fields(path):
        summary.add_values(rank, step, values)
    return summary.views()


def direction(name: str) -> str | None:
    """Whether a smaller or a larger value is better, guessed from the name."""
    lowered = name.lower()
    if _NO_BEST.search(lowered):
        return None
    return "max" if _MAXIMISE.search(lowered) else "min"


def metric_views(points: Iterable[MetricPoint]) -> list[MetricView]:
    """Each metric of the main rank (the lowest that logged), in order of first appearance."""
    summary = MetricSummary()
    for point in points:
        summary.add(point)
    return summary.views()


class MetricSummary:
    """:func:`metric_views` of points seen one at a time, in bounded memory."""

    def __init__(self) -> None:
        self._names: dict[str, None] = {}  # every rank's, in order of first appearance
        self._rank: int | None = None  # the main rank of the points so far
        self._series: dict[str, _Series] = {}  # the main rank's
        self._kept = 0  # values kept as they are, all series together

    def add(self, point: MetricPoint) -> None:
        self.add_values(point.rank, point.step, point.values)

    def add_values(self, rank: int, step: int | None, values: Mapping[str, float]) -> None:
        if self._rank is None or rank < self._rank:
            self._rank, self._series, self._kept = rank, {}, 0
        names, main = self._names, rank == self._rank
        for name, value in values.items():
            if name not in names:
                if len(names) >= MAX_METRICS:
                    continue
                names[name] = None
            if main:
                kept = self._series.get(name)
                if kept is None:
                    kept = self._series[name] = _Series(direction(name))
                self._kept += kept.add(value, step)
        while self._kept > KEEP_VALUES:
            longest = max(self._series.values(), key=_Series.kept)
            self._kept -= longest.kept()
            longest.to_blocks()

    def views(self) -> list[MetricView]:
        return [self._series[n].view(n) for n in self._names if n in self._series]


class _Series:
    """One metric of the main rank: count, last, best and its values, or once it is too
    long to keep, the sums of at most :data:`TREND_BLOCKS` blocks of it."""

    def __init__(self, way: str | None) -> None:
        self.way = way
        self.count = 0
        self.last = math.nan
        self.last_step: int | None = None
        self.best: float | None = None
        self.best_step: int | None = None
        self.values: array[float] | None = array("d")
        self.block = 0  # values a block holds, once in blocks
        self.sums: array[float] = array("d")  # of each block's finite values
        self.finite: array[int] = array("q")  # how many each block holds

    def add(self, value: float, step: int | None) -> int:
        """Take one value; how many values it kept as they are (0 or 1)."""
        self.count += 1
        self.last, self.last_step = value, step
        if self.way is not None and math.isfinite(value) and self._better(value):
            self.best, self.best_step = value, step
        if self.values is not None:
            self.values.append(value)
            return 1
        if (self.count - 1) % self.block == 0:  # a block starts
            if len(self.sums) == TREND_BLOCKS:
                self._merge_pairs()
            self.sums.append(0.0)
            self.finite.append(0)
        if math.isfinite(value):
            self.sums[-1] += value
            self.finite[-1] += 1
        return 0

    def _better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best if self.way == "min" else value > self.best

    def kept(self) -> int:
        return len(self.values) if self.values is not None else 0

    def to_blocks(self) -> None:
        values, self.values = self.values or array("d"), None
        self.block = 1
        while -(-len(values) // self.block) > TREND_BLOCKS // 2:
            self.block *= 2
        for start in range(0, len(values), self.block):
            good = [v for v in values[start : start + self.block] if math.isfinite(v)]
            self.sums.append(sum(good))
            self.finite.append(len(good))

    def _merge_pairs(self) -> None:
        self.sums = array(
            "d", (a + b for a, b in zip(self.sums[::2], self.sums[1::2], strict=True))
        )
        self.finite = array(
            "q", (a + b for a, b in zip(self.finite[::2], self.finite[1::2], strict=True))
        )
        self.block *= 2

    def view(self, name: str) -> MetricView:
        return MetricView(
            name=name,
            count=self.count,
            last=self.last,
            last_step=self.last_step,
            direction=self.way,
            best=self.best,
            best_step=self.best_step,
            values=tuple(self.values) if self.values is not None else self._spans(),
        )

    def _spans(self) -> tuple[float, ...]:
        """The means of equal spans of the series, from its blocks: a block that a span
        boundary cuts counts in each span for the share of it that span covers."""
        points = min(TREND_POINTS, self.count)
        sums, counts = [0.0] * points, [0.0] * points
        # In units of 1/points of a value: span j is [j * count, (j + 1) * count).
        span = 0
        for k, (total, finite) in enumerate(zip(self.sums, self.finite, strict=True)):
            low = k * self.block * points
            high = min((k + 1) * self.block, self.count) * points
            pos = low
            while pos < high:
                while (span + 1) * self.count <= pos:
                    span += 1
                cut = min(high, (span + 1) * self.count)
                share = (cut - pos) / (high - low)
                sums[span] += total * share
                counts[span] += finite * share
                pos = cut
        return tuple(s / c if c > 0 else math.nan for s, c in zip(sums, counts, strict=True))


def sparkline(values: Sequence[float], width: int = 24) -> str:
    """``▁▂▄█``-style line of at most ``width`` cells (bucket means); blank for NaN."""
    if not values or width <= 0:
        return ""
    buckets = _buckets(values, width)
    finite = [b for b in buckets if b is not None]
    if not finite:
        return " " * len(buckets)
    low, high = min(finite), max(finite)
    span = high - low
    top = len(SPARK) - 1
    return "".join(
        " " if b is None else SPARK[0 if span == 0 else round((b - low) / span * top)]
        for b in buckets
    )


def _buckets(values: Sequence[float], width: int) -> list[float | None]:
    count = min(width, len(values))
    out: list[float | None] = []
    for i in range(count):
        chunk = values[i * len(values) // count : (i + 1) * len(values) // count]
        good = [v for v in chunk if math.isfinite(v)]
        out.append(sum(good) / len(good) if good else None)
    return out
