"""State shared by every command: the global options, turned into a Workspace."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import typer

from accel.workspace import Workspace


@dataclass
class GlobalOptions:
    workspace: str | None = None
    argv: list[str] = field(default_factory=list)  # the command line, as main() got it
    fast_exit: bool = False  # set by a command whose teardown may be skipped (see main.run)


def options(ctx: typer.Context) -> GlobalOptions:
    root = ctx.find_root()
    if not isinstance(root.obj, GlobalOptions):
        root.obj = GlobalOptions()
    return root.obj


def word_after(ctx: typer.Context, flag: str) -> str | None:
    """The word that follows ``flag`` on the command line (an optional value), if any."""
    argv = options(ctx).argv
    if flag in argv:
        index = argv.index(flag) + 1
        if index < len(argv) and not argv[index].startswith("-"):
            return argv[index]
    return None


def workspace(ctx: typer.Context, flags: Mapping[str, Any] | None = None) -> Workspace:
    """The workspace for this command (found, not created; a note when one is made, so a
    typo in ``--workspace`` is seen before a run trains from step 0 in a new folder)."""
    from accel.cli import _output

    ws = Workspace.discover(path=options(ctx).workspace, env=os.environ, flags=flags)
    ws.on_create = lambda path: _output.info(f"note: created a new workspace at {path}")
    return ws


def read_workspace(ctx: typer.Context) -> Workspace:
    """For commands that only read (runs, logs, stack, checkpoints list/show/verify,
    cache list): a broken config is one warning, and they go on with its valid part."""
    from accel.cli import _output

    ws = workspace(ctx)
    salvaged = ws.salvage_config()
    if salvaged is not None:
        _output.warn(f"{salvaged.error} (read-only: {salvaged.going_on(ws.data_path)})")
    from accel import identity

    if identity.root_state(ws.path) == identity.FOREIGN:  # that line, not "no runs yet"
        raise identity.not_a_workspace(ws.path)
    return ws


def heal_runs(ws: Workspace) -> None:
    """Runs whose launcher died are marked crashed by the first command that notices."""
    from accel.cli import _output
    from accel.errors import AccelError
    from accel.runs import mark_crashed

    try:
        ws.salvage_config()  # the command itself reports a broken config
        if ws.refusal() is not None or not ws.identify():
            return  # not accel's folder (or not one yet): never written to
        healed = mark_crashed(ws.layout)
    except AccelError:
        return  # e.g. a layout newer than this accel: do not touch it
    for run_id in healed:
        _output.info(
            f"accel: run {run_id} was left running by a launcher that is gone: marked crashed"
        )
