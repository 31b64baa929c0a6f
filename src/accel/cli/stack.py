"""``accel stack [RUN]``: dump the Python stack of every live rank of a run.

Each worker started by ``accel launch`` dumps all its threads on SIGUSR1 (see
accel.hang); the dumps also go into the ranks' logs. Ranks run on this machine only.
"""

from __future__ import annotations

import socket

import typer

from accel.cli import _app, _output
from accel.errors import AccelError, UsageError


def stack(
    ctx: typer.Context,
    run: str = typer.Argument("latest", help="Run id (or a unique part of it), or latest."),
    as_json: bool = typer.Option(False, "--json", help="rank -> pid and stack, for machines."),
) -> None:
    """Show every live rank's Python stack side by side (and append it to its log)."""
    from accel import hang
    from accel.runs import read_run, resolve_run_id

    ws = _app.read_workspace(ctx)
    record = read_run(ws, resolve_run_id(ws, run))
    if not record.live:
        raise UsageError(f"run {record.id} is not running ({record.status}); nothing to dump")
    if record.hostname and record.hostname != socket.gethostname():
        raise UsageError(f"run {record.id} runs on {record.hostname}; run `accel stack` there")
    pids = hang.read_workers(record.path)
    if not pids:
        raise AccelError(f"run {record.id} has no workers yet; try again in a moment")
    stacks = hang.dump_stacks(record.path, pids)
    hang.append_to_rank_logs(record.path, stacks, "accel stack")
    if as_json:
        _output.print_json({str(r): {"pid": pids[r], "stack": s} for r, s in stacks.items()})
    else:
        render(stacks, pids)


def render(stacks: dict[int, str], pids: dict[int, int]) -> None:
    """Side by side on a terminal; one block per rank when piped."""
    titles = {rank: f"rank {rank} (pid {pids.get(rank, '?')})" for rank in stacks}
    if _output.is_terminal():
        from rich.table import Table
        from rich.text import Text

        table = Table(show_lines=False, expand=True)
        for rank in stacks:
            table.add_column(titles[rank], overflow="fold", ratio=1)
        table.add_row(*(Text(text) for text in stacks.values()))
        _output.console().print(table)
        return
    for rank, text in stacks.items():
        print(f"===== {titles[rank]} =====\n{text}\n", flush=True)
