"""The metrics a run logged (``metrics.jsonl``): points, series, last/best, sparklines.

Each line is what ``Accelerator.log`` appends: ``{"step", "time", "rank", **metrics}``.
Reading skips torn and foreign lines; only numeric values make series.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel._fs import read_from
from accel.layout import METRICS_FILE as METRICS_FILE  # re-exported

SPARK = "▁▂▃▄▅▆▇█"
_RESERVED = ("step", "time", "rank")
_MAXIMISE = re.compile(
    r"acc|f1|precision|recall|auc|bleu|rouge|score|reward|iou|map\b|top\d|throughput|per_s|/s$",
)
_NO_BEST = re.compile(r"(^|[_/.])(lr|learning_rate|epoch|step|grad_norm|scale)($|[_/.])")


@dataclass(frozen=True)
class MetricPoint:
    step: int | None
    time: float | None
    rank: int
    values: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricView:
    """One metric of one run as ``runs show`` lists it (main rank's series)."""

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
    out = []
    for line in lines:
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # torn, foreign, or nested beyond json's reach
            continue
        if isinstance(data, dict):
            try:
                out.append(_point(data))
            except OverflowError:  # a number no float holds (400 digits): not a metric
                continue
    return out


def _point(data: Mapping[str, Any]) -> MetricPoint:
    step, stamp, rank = data.get("step"), data.get("time"), data.get("rank")
    values = {
        str(k): float(v)
        for k, v in data.items()
        if k not in _RESERVED and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    return MetricPoint(
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        time=float(stamp) if isinstance(stamp, (int, float)) else None,
        rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else 0,
        values=values,
    )


def read_metrics(path: Path) -> list[MetricPoint]:
    try:
        text = read_from(path).decode("utf-8", errors="replace")
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return []
    return parse_metrics(text.split("\n"))


def metric_names(points: Iterable[MetricPoint]) -> list[str]:
    """Numeric metric names in order of first appearance."""
    return list(dict.fromkeys(name for p in points for name in p.values))


def main_rank(points: Sequence[MetricPoint]) -> int | None:
    return min((p.rank for p in points), default=None)


def series(
    points: Sequence[MetricPoint], name: str, rank: int | None = None
) -> list[tuple[float, float]]:
    """``(x, value)`` of ``name`` for ``rank`` (default: the main rank); x is the step,
    else the point's index."""
    rank = main_rank(points) if rank is None else rank
    picked = [p for p in points if p.rank == rank and name in p.values]
    return [
        (float(p.step if p.step is not None else i), p.values[name]) for i, p in enumerate(picked)
    ]


def direction(name: str) -> str | None:
    """Whether a smaller or a larger value is better, guessed from the name."""
    lowered = name.lower()
    if _NO_BEST.search(lowered):
        return None
    return "max" if _MAXIMISE.search(lowered) else "min"


def metric_views(points: Sequence[MetricPoint]) -> list[MetricView]:
    rank = main_rank(points)
    views = []
    for name in metric_names(points):
        picked = [p for p in points if p.rank == rank and name in p.values]
        if picked:
            views.append(_view(name, picked))
    return views


def _view(name: str, picked: Sequence[MetricPoint]) -> MetricView:
    values = [p.values[name] for p in picked]
    way = direction(name)
    finite = [(v, p.step) for v, p in zip(values, picked, strict=True) if math.isfinite(v)]
    best: tuple[float, int | None] | None = None
    if way is not None and finite:
        best = (min if way == "min" else max)(finite, key=lambda vs: vs[0])
    return MetricView(
        name=name,
        count=len(values),
        last=values[-1],
        last_step=picked[-1].step,
        direction=way,
        best=best[0] if best else None,
        best_step=best[1] if best else None,
        values=tuple(values),
    )


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
