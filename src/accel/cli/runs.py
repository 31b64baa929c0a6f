"""``accel runs`` (past and live runs) and ``accel logs`` (a run's per-rank logs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _help, _output, runs_view

if TYPE_CHECKING:
    from accel.runs import RunRecord

app = typer.Typer(
    help="List past and live runs (newest first).",
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
def runs(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="A JSON list, for machines."),
    limit: str = typer.Option("20", "--limit", "-l", metavar="N", help="Newest N runs; 0 = all."),
) -> None:
    """The runs, newest first, with status, duration and exit code."""
    from accel.units import parse_count

    newest = parse_count(limit, "--limit")
    if ctx.invoked_subcommand is not None:
        return
    from accel.runs import list_runs

    ws = _app.read_workspace(ctx)
    _app.heal_runs(ws)
    found = list_runs(ws.layout, newest)  # reads only the records it shows
    for r in found:
        if r.problem:  # listed (never hidden), and why its record is not shown
            _output.warn(f"run {r.id}: {r.problem}")
    if as_json:
        _output.print_json([_json(r) for r in found])
        return
    if not found:
        _output.out("no runs yet; start one with `accel launch SCRIPT`")
        return
    _output.table(
        None,
        ["run", "name", "status", "started", "duration", "exit", "ranks", "restarts"],
        [_row(r) for r in found],
    )


def _row(r: RunRecord) -> list[Any]:
    from accel.units import format_duration, local_time

    started = local_time(r.started_at) if r.started_at else ""
    duration = format_duration(r.duration) if r.duration is not None else ""
    status = r.status + (f" (rank {r.failed_rank})" if r.failed_rank is not None else "")
    if r.raw.get("nonfinite"):
        status += ", diverged"
    return [r.id, r.name, status, started, duration, r.exit_code, r.world_size, r.restarts]


def _json(r: RunRecord) -> dict[str, Any]:
    return {
        **dict(r.raw),
        "id": r.id,
        "status": r.status,
        "live": r.live,
        "duration": r.duration,
        "path": str(r.path),
    }


def logs(
    ctx: typer.Context,
    run: str = typer.Argument(
        "latest", metavar="RUN", help="Run id (or a unique part of it), or latest."
    ),
    rank: list[int] = typer.Option(
        None, "--rank", "-r", metavar="RANK", help="Only this rank (repeatable)."
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as the run writes."),
    prefix: bool = typer.Option(True, "--prefix/--no-prefix", help="Prefix lines with the rank."),
    grep: str | None = typer.Option(
        None, "--grep", "-g", metavar="PATTERN", help="Only lines matching this regular expression."
    ),
    since: str | None = typer.Option(
        None,
        "--since",
        metavar="DURATION",
        help="Only output of the last DURATION (10m) or since a time (ISO).",
    ),
    tail: str | None = typer.Option(
        None, "--tail", "-n", metavar="N", help="Only the last N lines of each rank log."
    ),
) -> None:
    """Show a run's per-rank logs; --follow until the run ends."""
    from accel import runs as runs_mod
    from accel.cli._worker_console import WorkerConsole
    from accel.runs.follow import follow as follow_logs
    from accel.runs.follow import select_logs
    from accel.runs.logindex import line_filter, parse_since
    from accel.units import parse_count

    lines = None if tail is None else parse_count(tail, "--tail")
    keep = line_filter(grep) if grep else None
    cutoff = parse_since(since) if since else None
    ws = _app.read_workspace(ctx)
    record = runs_mod.read_run(ws.layout, runs_mod.resolve_run_id(ws.layout, run))
    wanted = set(rank or ())
    files = select_logs(record, wanted)
    if not follow or record.status != runs_mod.RunStatus.RUNNING:  # no log is still to come
        _check_ranks(record, wanted, set(files))
        if not files and not follow:
            spare = ": it waited as a spare node and no worker ran here" if record.spare else ""
            _output.warn(f"run {record.id} has no rank logs{spare}")
            return
    else:
        _check_world(record, wanted)
    console = WorkerConsole(max(files, default=0) + 1, prefix=prefix, hold=True)
    try:
        for rank_, stream, piece in follow_logs(
            ws.layout,
            record,
            wanted,
            live=follow,
            keep=keep,
            cutoff=cutoff,
            tail=lines,
            pause=console.flush,
        ):
            console(rank_, stream, piece)
    finally:
        console.end_line()
    if follow:
        final = runs_mod.read_run(ws.layout, record.id)
        _output.info(
            f"run {final.id} {final.status}"
            + (f", exit code {final.exit_code}" if final.exit_code is not None else "")
        )


def _check_world(record: RunRecord, wanted: set[int]) -> None:
    """A live run's ranks may not have logged yet, but one beyond its world never will."""
    from accel.errors import UsageError

    world = record.world_size
    beyond = sorted(r for r in wanted if world is not None and r >= world)
    if beyond and world is not None:
        raise UsageError(
            f"run {record.id} has {world} rank(s), 0 to {world - 1}: "
            f"no rank {', '.join(map(str, beyond))}"
        )


def _check_ranks(record: RunRecord, wanted: set[int], found: set[int]) -> None:
    """Ranks asked for that the run has no log of: exit 2 when none of them has one (as
    a step that is not there), a warning when some have; the line says which ranks do."""
    from accel.errors import UsageError
    from accel.runs.follow import select_logs

    missing = sorted(wanted - found)
    if not missing:
        return
    have = ", ".join(map(str, select_logs(record, set()))) or "none"  # every log, in order
    line = (
        f"run {record.id} has no log of rank {', '.join(map(str, missing))}; "
        f"its logs here: ranks {have}"
    )
    if not found:
        raise UsageError(line)
    _output.warn(line)


app.command("show", cls=_help.Command)(runs_view.show)
app.command("plot", cls=_help.Command)(runs_view.plot)
