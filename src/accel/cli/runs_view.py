"""``accel runs show [RUN]`` and ``accel runs plot [RUN...]``: render accel.runs views.

No torch here; matplotlib only inside ``plot`` (an optional extra).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _output

if TYPE_CHECKING:
    from accel.runs.metrics import MetricView
    from accel.runs.view import RunView
    from accel.telemetry import ResourceSummary


def show(
    ctx: typer.Context,
    run: str = typer.Argument(
        "latest", metavar="RUN", help="Run id (or a unique part of it), or latest."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for machines."),
) -> None:
    """Summary, per-rank status, resource peaks and metrics (last, best, trend) of a run."""
    from accel.runs.view import load_view

    ws = _app.read_workspace(ctx)
    _app.heal_runs(ws)
    view = load_view(ws.layout, run, lambda: ws.config.nested())
    if view.record.problem:
        _output.warn(f"run {view.record.id}: {view.record.problem}")
    if as_json:
        _output.print_json(view.to_json())
        return
    for line in summary_lines(view):
        _output.out(line, markup=True)
    _ranks(view)
    _resources(view.resources)
    _metrics(view.metrics)


def summary_lines(view: RunView) -> list[str]:
    """Lines of rich markup; what comes from the run is in them through ``text``."""
    from accel.units import format_duration, local_time

    text = _output.text
    r = view.record
    status = r.status + (f" (exit {r.exit_code})" if r.exit_code is not None else "")
    if r.duration is not None:
        status += f" after {format_duration(r.duration)}"
    if r.restarts:
        status += f", {r.restarts} restart{'s' if r.restarts != 1 else ''}"
    lines = [
        f"[bold]run {text(r.id)}[/bold]" + (f" ({text(r.name)})" if r.name else ""),
        f"  status    {text(status)}",
        f"  command   {text(' '.join(r.command)) or '?'}",
        f"  started   {text(local_time(r.started_at))}"
        + (f"   ended {text(local_time(r.ended_at))}" if r.ended_at else ""),
    ]
    if r.spare:
        from accel.runs.record import SPARE_UNUSED

        lines.append(f"  spare     {SPARE_UNUSED}")
    summary = view.error_summary
    if summary:
        who = "" if summary.startswith("rank ") else f"rank {r.failed_rank}: "
        lines.append(f"  failed    {text(who + summary)}")
    for attempt, why in view.restarts:
        lines.append(f"  restarted after attempt {attempt}: {text(why)}")
    for hang in view.hangs[-1:]:
        lines.append(f"  hung      {text(str(hang.get('message', 'no activity')))}")
    for ended in view.teardown:
        lines.append(f"  teardown  {text(str(ended.get('message', '?')))}")
    for bad in view.nonfinite:
        lines.append(f"  [yellow]diverged[/yellow]  {text(_nonfinite_text(bad))}")
    lines.extend(_config_lines(view))
    return lines


def _nonfinite_text(entry: Any) -> str:
    from accel.launch.divergence import NonFinite

    try:
        return NonFinite(
            str(entry["metric"]), int(entry["rank"]), entry.get("step"), str(entry["value"])
        ).message
    except (KeyError, TypeError, ValueError):
        return str(dict(entry))


def _config_lines(view: RunView) -> list[str]:
    if not isinstance(view.record.raw.get("config"), Mapping):
        return ["  config    (not recorded: no launch recorded this run)"]
    if view.config_diff is None:
        return ["  config    (the current config is invalid: no comparison)"]
    if not view.config_diff:
        return ["  config    same as the current config"]
    head = "  config    "
    out = []
    for change in view.config_diff:
        run, now = _value(change.key, change.run), _value(change.key, change.current)
        out.append(f"{head}{change.key}: {run} (now {now})")
        head = " " * len(head)
    return [_output.text(line) for line in out]


def _value(key: str, value: Any) -> str:
    from accel.config.schema import display

    return value if value == "(unset)" else display(key, value)


def _ranks(view: RunView) -> None:
    if not view.ranks:
        return
    _output.out("")
    rows = [[v.rank, v.status, v.exit_code, v.detail] for v in view.ranks]
    _output.table("ranks", ["rank", "status", "exit", "detail"], rows)


def _resources(summary: ResourceSummary) -> None:
    from accel.units import format_size

    if not summary.samples:
        return
    _output.out("")
    rows = []
    for rank, stats in summary.ranks.items():
        cpu, rss, threads = stats.get("cpu_percent"), stats.get("rss_bytes"), stats.get("threads")
        rows.append(
            [
                rank,
                f"{cpu.peak:.0f}%" if cpu else "",
                f"{cpu.mean:.0f}%" if cpu else "",
                format_size(rss.peak) if rss else "",
                format_size(rss.mean) if rss else "",
                f"{threads.peak:.0f}" if threads else "",
            ]
        )
    title = f"resources ({summary.samples} samples)"
    columns = ["rank", "cpu peak", "cpu mean", "rss peak", "rss mean", "threads"]
    _output.table(title, columns, rows)
    if summary.gpus:
        _output.out("")
        _output.table(
            "gpus",
            ["gpu", "util peak", "util mean", "memory peak", "temp peak", "power peak"],
            _gpu_rows(summary),
        )


def _gpu_rows(summary: ResourceSummary) -> list[list[Any]]:
    from accel.units import format_size

    rows = []
    for index, stats in summary.gpus.items():
        util, mem = stats.get("util_percent"), stats.get("memory_used_bytes")
        temp, power = stats.get("temperature_c"), stats.get("power_w")
        total = summary.gpu_memory_total.get(index)
        memory = format_size(mem.peak) if mem else ""
        if mem and total:
            memory += f" / {format_size(total)}"
        rows.append(
            [
                index,
                f"{util.peak:.0f}%" if util else "",
                f"{util.mean:.0f}%" if util else "",
                memory,
                f"{temp.peak:.0f} C" if temp else "",
                f"{power.peak:.0f} W" if power else "",
            ]
        )
    return rows


def _metrics(metrics: tuple[MetricView, ...]) -> None:
    if not metrics:
        return
    _output.out("")
    rows = [
        [
            m.name,
            _num(m.last),
            _best(m),
            m.last_step if m.last_step is not None else m.count,
            m.sparkline(24),
        ]
        for m in metrics
    ]
    _output.table("metrics", ["metric", "last", "best", "step", "trend"], rows)


def _best(m: MetricView) -> str:
    if m.best is None:
        return ""
    where = f" @ {m.best_step}" if m.best_step is not None else ""
    return f"{_num(m.best)} ({m.direction}){where}"


def _num(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def plot(
    ctx: typer.Context,
    run: list[str] = typer.Argument(
        None, metavar="RUN", help="Run ids to plot together (default: latest)."
    ),
    metric: list[str] = typer.Option(
        None,
        "--metric",
        "-m",
        metavar="NAME",
        help="Metric to plot (repeatable; default: every metric).",
    ),
    output: Path = typer.Option(None, "--output", "-o", metavar="PATH", help="The PNG to write."),
    resources: bool = typer.Option(
        True, "--resources/--no-resources", help="Add CPU, memory and GPU panels."
    ),
) -> None:
    """A PNG of metrics and resources over time; several runs are drawn together."""
    from accel.runs.plot import plot_runs

    ws = _app.read_workspace(ctx)
    done = plot_runs(ws.layout, run or ["latest"], metric or (), output, resources)
    panels = f"{done.panels} panel{'' if done.panels == 1 else 's'}"
    series = f"{done.series} series"
    _output.info(f"wrote {done.path} ({panels}, {series})")
