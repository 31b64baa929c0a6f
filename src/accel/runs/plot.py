"""``accel runs plot``: a PNG of metrics and resources over time, one or several runs.

matplotlib is an optional extra (``pip install 'accel-workspace[plot]'``); it is imported only
here, with the Agg backend and no pyplot global state. The PNG carries the plotted
series (panel, label, points) as JSON in its ``accel-series`` text chunk, so scripts
and tests can check what was drawn without reading pixels.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._version import install_extra
from accel.errors import AccelError, UsageError
from accel.layout import Layout
from accel.runs.metrics import METRICS_FILE, MetricPoint, metric_names, read_metrics, series
from accel.runs.record import read_run, resolve_run_id
from accel.telemetry import RESOURCES_FILE, Sample, read_samples

INSTALL_HINT = f"accel runs plot needs matplotlib: {install_extra('plot')}"
PNG_KEY = "accel-series"


@dataclass(frozen=True)
class PlotRun:
    """One run's data to plot; ``label`` names its lines."""

    label: str
    points: Sequence[MetricPoint]
    samples: Sequence[Sample] = ()


@dataclass(frozen=True)
class Series:
    panel: str
    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]


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
    names = list(metrics) or list(dict.fromkeys(n for r in runs for n in metric_names(r.points)))
    panels = metric_panels(runs, names) + (resource_panels(runs) if resources else [])
    out = output or Path(f"accel-{ids[0]}{'-compare' if len(ids) > 1 else ''}.png")
    title = ids[0] if len(ids) == 1 else " vs ".join(ids)
    written = plot(panels, out, title=title)
    return Plotted(written, len(panels), sum(len(p.series) for p in panels))


def load_run(layout: Layout, run_id: str, resources: bool = True) -> PlotRun:
    """A run's metric points (and resource samples) as its folder holds them."""
    folder = read_run(layout, run_id).path
    samples = read_samples(folder / RESOURCES_FILE) if resources else ()
    return PlotRun(run_id, read_metrics(folder / METRICS_FILE), samples)


def metric_panels(runs: Sequence[PlotRun], metrics: Sequence[str]) -> list[Panel]:
    """One panel per metric, one line per run (and per rank when several logged)."""
    for name in metrics:
        if not any(name in metric_names(r.points) for r in runs):
            known = sorted({n for r in runs for n in metric_names(r.points)})
            listed = ", ".join(known) if known else "none: the run logged no metrics"
            raise UsageError(f"no metric {name!r} in the run(s); logged metrics: {listed}")
    return [
        Panel(name, "step", tuple(s for r in runs for s in _metric_series(r, name)))
        for name in metrics
    ]


def _metric_series(run: PlotRun, name: str) -> list[Series]:
    ranks = sorted({p.rank for p in run.points if name in p.values})
    out = []
    for rank in ranks:
        xy = series(run.points, name, rank)
        label = run.label if len(ranks) == 1 else f"{run.label} rank {rank}"
        out.append(Series(name, label, tuple(x for x, _ in xy), tuple(y for _, y in xy)))
    return out


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
        [{"panel": s.panel, "label": s.label, "points": len(s.x)} for p in panels for s in p.series]
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
