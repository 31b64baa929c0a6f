"""Peaks and means of a run's samples: what ``run.json`` keeps under ``resources``.

Pure: samples in, a frozen summary out. ``to_json()`` is the run.json form::

    "resources": {"samples": 42, "first": 1764431234.5, "last": 1764431654.5,
      "ranks": {"0": {"cpu_percent": {"peak": 101.2, "mean": 96.3}, "rss_bytes": {...},
                      "threads": {...}}},
      "gpus": {"0": {"util_percent": {...}, "memory_used_bytes": {...}, ...}}}
"""

from __future__ import annotations

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
    """Peak and mean of every per-rank and per-GPU series; missing values are skipped."""
    rank_values: dict[int, dict[str, list[float]]] = {}
    gpu_values: dict[int, dict[str, list[float]]] = {}
    totals: dict[int, int] = {}
    times: list[float] = []
    for sample in samples:
        times.append(sample.time)
        for rank, stats in sample.ranks.items():
            _collect(rank_values.setdefault(rank, {}), asdict(stats), RANK_FIELDS)
        for gpu in sample.gpus:
            _collect(gpu_values.setdefault(gpu.index, {}), asdict(gpu), GPU_FIELDS)
            if gpu.memory_total_bytes is not None:
                totals[gpu.index] = gpu.memory_total_bytes
    return ResourceSummary(
        samples=len(times),
        first=min(times) if times else None,
        last=max(times) if times else None,
        ranks={r: _reduce(v) for r, v in sorted(rank_values.items())},
        gpus={g: _reduce(v) for g, v in sorted(gpu_values.items())},
        gpu_memory_total=totals,
    )


def _collect(into: dict[str, list[float]], values: Mapping[str, Any], names: Sequence[str]) -> None:
    for name in names:
        value = values.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            into.setdefault(name, []).append(float(value))


def _reduce(series: Mapping[str, list[float]]) -> dict[str, Stat]:
    return {
        name: Stat(peak=max(vals), mean=round(sum(vals) / len(vals), 3), count=len(vals))
        for name, vals in series.items()
        if vals
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
