"""``accel runs`` (past and live runs) and ``accel logs`` (a run's per-rank logs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _output, runs_view

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
    limit: int = typer.Option(20, "--limit", "-l", min=0, help="Newest N runs; 0 = all."),
) -> None:
    """The runs, newest first, with status, duration and exit code."""
    if ctx.invoked_subcommand is not None:
        return
    from accel.runs import list_runs

    ws = _app.read_workspace(ctx)
    _app.heal_runs(ws)
    found = list_runs(ws)
    if limit:
        found = found[:limit]
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
    from accel.units import format_duration

    started = (r.started_at or "")[:19].replace("T", " ")
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
    run: str = typer.Argument("latest", help="Run id (or a unique part of it), or latest."),
    rank: list[int] = typer.Option(None, "--rank", "-r", help="Only this rank (repeatable)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as the run writes."),
    prefix: bool = typer.Option(True, "--prefix/--no-prefix", help="Prefix lines with the rank."),
    grep: str | None = typer.Option(
        None, "--grep", "-g", help="Only lines matching this regular expression."
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only output of the last DURATION (10m) or since a time (ISO)."
    ),
) -> None:
    """Show a run's per-rank logs; --follow until the run ends."""
    from accel import runs as runs_mod
    from accel.runview.logs import line_filter, parse_since

    keep = line_filter(grep) if grep else None
    cutoff = parse_since(since) if since else None
    ws = _app.read_workspace(ctx)
    record = runs_mod.read_run(ws, runs_mod.resolve_run_id(ws, run))
    wanted = set(rank or ())
    files = _select(record, wanted)
    if not files and not follow:
        _output.warn(
            f"run {record.id} has no rank logs"
            + (f" for rank(s) {sorted(wanted)}" if wanted else "")
        )
        return
    tailer = _Tailer(files, prefix, keep, cutoff)
    tailer.pump(final=not follow)
    while follow and runs_mod.is_live(ws, record.id):
        time.sleep(0.2)
        tailer.add(_select(record, wanted))
        tailer.pump()
    if follow:
        tailer.add(_select(record, wanted))
        tailer.pump(final=True)
        final = runs_mod.read_run(ws, record.id)
        _output.info(
            f"run {final.id} {final.status}"
            + (f", exit code {final.exit_code}" if final.exit_code is not None else "")
        )


def _select(record: RunRecord, wanted: set[int]) -> dict[int, Path]:
    return {r: p for r, p in record.rank_logs().items() if not wanted or r in wanted}


class _Tailer:
    """Prints what each rank log gained since last time, as the live console showed it.

    stdout lines go to stdout and stderr lines to stderr; partial lines and progress
    bars show as they were written (a redraw that a later one replaced is skipped).
    With ``--grep``, whole lines only.
    """

    def __init__(
        self,
        files: dict[int, Path],
        prefix: bool,
        keep: Callable[[str], bool] | None = None,
        cutoff: float | None = None,
    ) -> None:
        from accel.cli._worker_console import WorkerConsole

        self.keep = keep
        self.cutoff = cutoff
        self.offsets: dict[int, int] = {}
        self.files: dict[int, Path] = {}
        self.readers: dict[int, Any] = {}
        self.lines: dict[tuple[int, str], Any] = {}
        self.console = WorkerConsole(max(files, default=0) + 1, prefix=prefix)
        self.add(files)

    def add(self, files: dict[int, Path]) -> None:
        from accel.launch._streams import RankLogReader
        from accel.runview.logs import start_offset

        for r, p in files.items():
            if r not in self.files:
                self.files[r] = p
                self.offsets[r] = start_offset(p, self.cutoff)
                self.readers[r] = RankLogReader()

    def pump(self, final: bool = False) -> None:
        for r, path in sorted(self.files.items()):
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets[r])
                    data = fh.read()
            except OSError:
                continue
            self.offsets[r] += len(data)
            for stream, piece in self.readers[r].feed(data, final):
                self._show(r, stream, piece)
        if final:
            self.console.end_line()

    def _show(self, rank: int, stream: str, piece: Any) -> None:
        if self.keep is None:
            self.console(rank, stream, piece)
            return
        from accel.launch._streams import NL, Lines, Piece

        line = self.lines.setdefault((rank, stream), Lines()).add(piece)
        if line is not None and self.keep(line.decode("utf-8", errors="replace")):
            self.console(rank, stream, Piece(line, NL, True, False))


app.command("show")(runs_view.show)
app.command("plot")(runs_view.plot)
