"""One resource sample and its JSON line in ``resources.jsonl``.

::

    {"time": 1764431234.52, "ranks": {"0": {"pid": 4242, "cpu_percent": 97.5,
     "rss_bytes": 412090368, "threads": 9, "gpu_memory_bytes": null}},
     "gpus": [{"index": 0, "name": "NVIDIA H100", "util_percent": 93.0,
     "memory_used_bytes": ..., "memory_total_bytes": ..., "temperature_c": 61.0,
     "power_w": 402.1}]}

``time`` is seconds since the epoch. Reading tolerates a torn last line (the launcher
may have been killed mid-append) and skips any line that is not a sample.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel._fs import read_lines
from accel.layout import RESOURCES_FILE as RESOURCES_FILE  # re-exported
from accel.telemetry._gpu import GpuStats


@dataclass(frozen=True)
class RankStats:
    """One rank's process at one instant."""

    pid: int
    cpu_percent: float
    rss_bytes: int
    threads: int
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True)
class Sample:
    time: float
    ranks: Mapping[int, RankStats] = field(default_factory=dict)
    gpus: tuple[GpuStats, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "time": round(self.time, 3),
            "ranks": {str(r): dict(vars(s)) for r, s in sorted(self.ranks.items())},
            "gpus": [dict(vars(g)) for g in self.gpus],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sample:
        """A sample from a decoded line; ValueError/TypeError/KeyError when it is not one."""
        ranks = {int(r): RankStats(**s) for r, s in dict(data.get("ranks") or {}).items()}
        gpus = tuple(GpuStats(**g) for g in data.get("gpus") or ())
        return cls(time=float(data["time"]), ranks=ranks, gpus=gpus)


def to_line(sample: Sample) -> str:
    return json.dumps(sample.to_json(), separators=(",", ":")) + "\n"


def parse_lines(lines: Iterator[str] | list[str]) -> list[Sample]:
    """Samples from JSON lines, skipping blank, torn and foreign lines."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        try:
            out.append(Sample.from_json(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            continue  # RecursionError: a line nested deeper than json can read
    return out


MAX_LINE = 1 << 20  # a sample of a thousand ranks and GPUs is far shorter: longer is damage


def iter_samples(path: Path) -> Iterator[Sample]:
    """The samples in ``path`` (a run's resources.jsonl) as it is read, line by line, in
    bounded memory; none when there is no file or it cannot be read."""
    try:
        lines = read_lines(path, limit=MAX_LINE)
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return
    try:
        for line in lines:
            yield from parse_lines([line.decode("utf-8", errors="replace")])
    except OSError:  # a read failed half-way: the samples before it stand
        return


def read_samples(path: Path) -> list[Sample]:
    """Every sample in ``path`` (a run's resources.jsonl); [] when there is none."""
    return list(iter_samples(path))
