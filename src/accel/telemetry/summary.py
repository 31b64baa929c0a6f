"""Peaks and means of a run's samples: what ``run.json`` keeps under ``resources``.

Pure: samples in, a frozen summary out. ``to_json()`` is the run.json form::

    "resources": {"samples": 42, "first": 1764431234.5, "last": 1764431654.5,
      "ranks": {"0": {"cpu_percent": {"peak": 101.2, "mean": 96.3}, "rss_bytes": {...},
                      "threads": {...}}},
      "gpus": {"0": {"util_percent": {...}, "memory_used_bytes": {...}, ...}}}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.telemetry.samples import Sample

RANK_FIELDS = ("cpu_percent", "rss_bytes", "threads", "gpu_memory_bytes")
GPU_FIELDS = ("util_percent", "memory_used_bytes", "temperature_c", "power_w")


@dataclass(frozen=True)
class Stat:
    peak: float
    mean: float
    count: int


@dataclass(frozen=True)
class ResourceSummary:
    samples: int = 0
    first: float | None = None
    last: float | None = None
    ranks: Mapping[int, Mapping[str, Stat]] = field(default_factory=dict)
    gpus: Mapping[int, Mapping[str, Stat]] = field(default_factory=dict)
    gpu_memory_total: Mapping[int, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "first": self.first,
            "last": self.last,
            "ranks": {str(r): _stats_json(s) for r, s in sorted(self.ranks.items())},
            "gpus": {str(g): _stats_json(s) for g, s in sorted(self.gpus.items())},
            "gpu_memory_total": {str(g): v for g, v in sorted(self.gpu_memory_total.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ResourceSummary:
        """Back from run.json; a malformed entry is dropped, not fatal."""
        try:
            return cls(
                samples=int(data.get("samples") or 0),
                first=_float(data.get("first")),
                last=_float(data.get("last")),
                ranks=_stats_from(data.get("ranks")),
                gpus=_stats_from(data.get("gpus")),
                gpu_memory_total={
                    int(k): int(v) for k, v in dict(data.get("gpu_memory_total") or {}).items()
                },
            )
        except (TypeError, ValueError, AttributeError):
            return cls()


def summarize(samples: Iterable[Sample]) -> ResourceSummary:
    """Peak and mean of every per-rank and per-GPU series; missing values are skipped.
    One pass, keeping per series its peak, sum and count: ``samples`` may stream from a
    file of any size."""
    rank_values: dict[int, dict[str, _Running]] = {}
    gpu_values: dict[int, dict[str, _Running]] = {}
    totals: dict[int, int] = {}
    count, first, last = 0, math.nan, math.nan
    for sample in samples:
        count += 1
        if count == 1 or sample.time < first:  # as min() and max() of them all would
            first = sample.time
        if count == 1 or sample.time > last:
            last = sample.time
        for rank, stats in sample.ranks.items():
            _collect(rank_values.setdefault(rank, {}), asdict(stats), RANK_FIELDS)
        for gpu in sample.gpus:
            _collect(gpu_values.setdefault(gpu.index, {}), asdict(gpu), GPU_FIELDS)
            if gpu.memory_total_bytes is not None:
                totals[gpu.index] = gpu.memory_total_bytes
    return ResourceSummary(
        samples=count,
        first=first if count else None,
        last=last if count else None,
        ranks={r: _reduce(v) for r, v in sorted(rank_values.items())},
        gpus={g: _reduce(v) for g, v in sorted(gpu_values.items())},
        gpu_memory_total=totals,
    )


class _Running:
    """One series so far: its peak, sum and count."""

    __slots__ = ("count", "peak", "total")

    def __init__(self) -> None:
        self.peak, self.total, self.count = math.nan, 0.0, 0

    def add(self, value: float) -> None:
        if not self.count or value > self.peak:  # as max() of them all would
            self.peak = value
        self.total += value
        self.count += 1


def _collect(into: dict[str, _Running], values: Mapping[str, Any], names: Sequence[str]) -> None:
    for name in names:
        value = values.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if name not in into:
                into[name] = _Running()
            into[name].add(float(value))


def _reduce(series: Mapping[str, _Running]) -> dict[str, Stat]:
    return {
        name: Stat(peak=s.peak, mean=round(s.total / s.count, 3), count=s.count)
        for name, s in series.items()
    }


def _stats_json(stats: Mapping[str, Stat]) -> dict[str, Any]:
    return {name: asdict(stat) for name, stat in stats.items()}


def _stats_from(data: Any) -> dict[int, dict[str, Stat]]:
    out: dict[int, dict[str, Stat]] = {}
    for key, stats in dict(data or {}).items():
        out[int(key)] = {
            name: Stat(float(s["peak"]), float(s["mean"]), int(s.get("count", 0)))
            for name, s in dict(stats).items()
        }
    return out


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
