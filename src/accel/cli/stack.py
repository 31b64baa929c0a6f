"""``accel stack [RUN]``: dump the Python stack of every live rank of a run.

See :mod:`accel.runs.stacks`; this renders them side by side.
"""

from __future__ import annotations

import typer

from accel.cli import _app, _output


def stack(
    ctx: typer.Context,
    run: str = typer.Argument(
        "latest", metavar="RUN", help="Run id (or a unique part of it), or latest."
    ),
    as_json: bool = typer.Option(False, "--json", help="rank -> pid and stack, for machines."),
) -> None:
    """Show every live rank's Python stack side by side (and append it to its log)."""
    from accel.runs.stacks import dump_run_stacks

    ws = _app.read_workspace(ctx)
    found = dump_run_stacks(ws.layout, run)
    stacks, pids = found.stacks, found.pids
    if as_json:
        _output.print_json({str(r): {"pid": pids[r], "stack": s} for r, s in stacks.items()})
    else:
        render(stacks, pids)


def render(stacks: dict[int, str], pids: dict[int, int]) -> None:
    """Side by side on a terminal; one block per rank when piped."""
    titles = {rank: f"rank {rank} (pid {pids.get(rank, '?')})" for rank in stacks}
    if _output.is_terminal():
        from rich.table import Table

        table = Table(show_lines=False, expand=True)
        for rank in stacks:
            table.add_column(titles[rank], overflow="fold", ratio=1)
        table.add_row(*(_output.text(text) for text in stacks.values()))
        _output.console().print(table)
        return
    for rank, text in stacks.items():
        _output.out(f"===== {titles[rank]} =====\n{text}\n")
