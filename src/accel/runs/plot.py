"""``accel runs plot``: a PNG of metrics and resources over time, one or several runs.

matplotlib is an optional extra (``pip install 'accel-workspace[plot]'``); it is imported only
here, with the Agg backend and no pyplot global state. The PNG carries the plotted
series (panel, label, points) as JSON in its ``accel-series`` text chunk, so scripts
and tests can check what was drawn without reading pixels.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._version import install_extra
from accel.errors import AccelError, UsageError
from accel.layout import Layout
from accel.runs.metrics import MAX_METRICS, METRICS_FILE, MetricPoint, iter_metrics
from accel.runs.record import read_run, resolve_run_id
from accel.telemetry import RESOURCES_FILE, Sample, read_samples

INSTALL_HINT = f"accel runs plot needs matplotlib: {install_extra('plot')}"
PNG_KEY = "accel-series"
MAX_DRAWN = 4000  # points drawn of one line (a panel is 1000 pixels wide)


class PlotRun:
    """One run's data to plot; ``label`` names its lines.

    The metric points are kept as one series per metric and rank, as they stream by (x:
    the step, else the point's index in its series): a long run's million lines are
    arrays of floats, not a million objects. At most :data:`MAX_METRICS` names, as
    ``runs show`` follows.
    """

    def __init__(
        self, label: str, points: Iterable[MetricPoint], samples: Sequence[Sample] = ()
    ) -> None:
        self.label = label
        self.samples = samples
        self.tracks: dict[str, dict[int, tuple[array[float], array[float]]]] = {}
        for point in points:
            for name, value in point.values.items():
                ranks = self.tracks.get(name)
                if ranks is None:
                    if len(self.tracks) >= MAX_METRICS:
                        continue
                    ranks = self.tracks[name] = {}
                track = ranks.get(point.rank)
                if track is None:
                    track = ranks[point.rank] = (array("d"), array("d"))
                xs, ys = track
                xs.append(point.step if point.step is not None else len(xs))
                ys.append(value)

    @property
    def names(self) -> list[str]:
        """Its numeric metrics, in order of first appearance."""
        return list(self.tracks)


@dataclass(frozen=True)
class Series:
    panel: str
    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    logged: int | None = None  # the points of a line drawn from fewer (:func:`_thin`)


@dataclass(frozen=True)
class Panel:
    title: str
    xlabel: str
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Plotted:
    """What :func:`plot_runs` drew, for the caller to report."""

    path: Path
    panels: int
    series: int


def plot_runs(
    layout: Layout,
    refs: Sequence[str],
    metrics: Sequence[str] = (),
    output: Path | None = None,
    resources: bool = True,
) -> Plotted:
    """Plot the runs ``refs`` (ids, prefixes, ``latest``) together into one PNG.

    ``metrics``: every metric a run logged unless named; ``output``: a name made of the
    run ids in the working folder unless given.
    """
    ids = list(dict.fromkeys(resolve_run_id(layout, ref) for ref in (refs or ["latest"])))
    runs = [load_run(layout, run_id, resources) for run_id in ids]
    names = list(metrics) or list(dict.fromkeys(n for r in runs for n in r.names))
    panels = metric_panels(runs, names) + (resource_panels(runs) if resources else [])
    out = output or Path(f"accel-{ids[0]}{'-compare' if len(ids) > 1 else ''}.png")
    title = ids[0] if len(ids) == 1 else " vs ".join(ids)
    written = plot(panels, out, title=title)
    return Plotted(written, len(panels), sum(len(p.series) for p in panels))


def load_run(layout: Layout, run_id: str, resources: bool = True) -> PlotRun:
    """A run's metric points (and resource samples) as its folder holds them."""
    folder = read_run(layout, run_id).path
    samples = read_samples(folder / RESOURCES_FILE) if resources else ()
    return PlotRun(run_id, iter_metrics(folder / METRICS_FILE), samples)


def metric_panels(runs: Sequence[PlotRun], metrics: Sequence[str]) -> list[Panel]:
    """One panel per metric, one line per run (and per rank when several logged)."""
    for name in metrics:
        if not any(name in r.tracks for r in runs):
            known = sorted({n for r in runs for n in r.names})
            listed = ", ".join(known) if known else "none: the run logged no metrics"
            raise UsageError(f"no metric {name!r} in the run(s); logged metrics: {listed}")
    return [
        Panel(name, "step", tuple(s for r in runs for s in _metric_series(r, name)))
        for name in metrics
    ]


def _metric_series(run: PlotRun, name: str) -> list[Series]:
    ranks = run.tracks.get(name, {})
    out = []
    for rank, (xs, ys) in sorted(ranks.items()):
        label = run.label if len(ranks) == 1 else f"{run.label} rank {rank}"
        x, y = _thin(xs, ys)
        out.append(Series(name, label, x, y, logged=len(xs)))
    return out


def _thin(xs: Sequence[float], ys: Sequence[float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """At most :data:`MAX_DRAWN` points of a line, as a 1000-pixel-wide panel shows it:
    of each of ``MAX_DRAWN / 2`` equal spans, its lowest and highest point in their
    order (a spike stays drawn), or where it has no number, its first (a gap)."""
    if len(xs) <= MAX_DRAWN:
        return tuple(xs), tuple(ys)
    spans = MAX_DRAWN // 2
    kept: list[int] = []
    for k in range(spans):
        low, high = k * len(ys) // spans, (k + 1) * len(ys) // spans
        numbers = [i for i in range(low, high) if ys[i] == ys[i]]  # NaN is not
        if not numbers:
            kept.append(low)
            continue
        ends = {min(numbers, key=ys.__getitem__), max(numbers, key=ys.__getitem__)}
        kept += sorted(ends)
    return tuple(xs[i] for i in kept), tuple(ys[i] for i in kept)


_RESOURCE_PANELS = (
    ("CPU %", "cpu_percent", 1.0),
    ("RSS (MiB)", "rss_bytes", 1 / 2**20),
)
_GPU_PANELS = (
    ("GPU utilisation %", "util_percent", 1.0),
    ("GPU memory (MiB)", "memory_used_bytes", 1 / 2**20),
)


def resource_panels(runs: Sequence[PlotRun]) -> list[Panel]:
    """CPU % and RSS per rank, and GPU use per device, against minutes since the start."""
    panels = []
    for title, key, scale in _RESOURCE_PANELS:
        lines = tuple(s for r in runs for s in _rank_series(r, title, key, scale))
        if lines:
            panels.append(Panel(title, "minutes", lines))
    for title, key, scale in _GPU_PANELS:
        lines = tuple(s for r in runs for s in _gpu_series(r, title, key, scale))
        if lines:
            panels.append(Panel(title, "minutes", lines))
    return panels


def _minutes(samples: Sequence[Sample], sample: Sample) -> float:
    return round((sample.time - samples[0].time) / 60.0, 4)


def _rank_series(run: PlotRun, title: str, key: str, scale: float) -> list[Series]:
    ranks = sorted({rank for s in run.samples for rank in s.ranks})
    out = []
    for rank in ranks:
        picked = [s for s in run.samples if rank in s.ranks]
        xs = tuple(_minutes(run.samples, s) for s in picked)
        ys = tuple(float(getattr(s.ranks[rank], key)) * scale for s in picked)
        out.append(Series(title, f"{run.label} rank {rank}", xs, ys))
    return out


def _gpu_series(run: PlotRun, title: str, key: str, scale: float) -> list[Series]:
    indices = sorted({g.index for s in run.samples for g in s.gpus})
    out = []
    for index in indices:
        xy = [
            (_minutes(run.samples, s), float(getattr(g, key)) * scale)
            for s in run.samples
            for g in s.gpus
            if g.index == index and getattr(g, key) is not None
        ]
        if xy:
            label = f"{run.label} gpu {index}"
            out.append(Series(title, label, tuple(x for x, _ in xy), tuple(y for _, y in xy)))
    return out


def plot(panels: Sequence[Panel], out: Path, title: str | None = None) -> Path:
    """Draw ``panels`` stacked into the PNG ``out``; AccelError when matplotlib is missing."""
    if not panels:
        raise UsageError("nothing to plot: the run(s) have no metrics or resource samples")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise AccelError(INSTALL_HINT) from None
    fig = Figure(figsize=(10, 2.8 * len(panels) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, panel in zip(axes, panels, strict=True):
        _draw(ax, panel)
    if title:
        fig.suptitle(title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100, metadata={PNG_KEY: _describe(panels)})
    return out


def _draw(ax: Any, panel: Panel) -> None:
    for line in panel.series:
        ax.plot(
            line.x,
            line.y,
            label=line.label,
            linewidth=1.4,
            marker="." if len(line.x) < 40 else None,
        )
    ax.set_title(panel.title, loc="left", fontsize=10)
    ax.set_xlabel(panel.xlabel)
    ax.grid(True, alpha=0.3)
    if panel.series:
        ax.legend(fontsize=8, loc="best")


def _describe(panels: Sequence[Panel]) -> str:
    return json.dumps(
        [
            {"panel": s.panel, "label": s.label, "points": len(s.x), "logged": s.logged or len(s.x)}
            for p in panels
            for s in p.series
        ]
    )


def read_png_series(path: Path) -> list[dict[str, Any]]:
    """The ``accel-series`` chunk of a PNG written by :func:`plot` ([] when absent)."""
    import struct

    data = Path(path).read_bytes()
    pos = 8
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"tEXt" and body.startswith(PNG_KEY.encode() + b"\0"):
            parsed = json.loads(body.split(b"\0", 1)[1].decode("latin-1"))
            return parsed if isinstance(parsed, list) else []
        pos += 12 + length
    return []
