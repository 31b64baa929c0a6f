"""State shared by every command: the global options, turned into a Workspace."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import typer

from accel.workspace import Workspace


@dataclass
class GlobalOptions:
    workspace: str | None = None


def options(ctx: typer.Context) -> GlobalOptions:
    root = ctx.find_root()
    if not isinstance(root.obj, GlobalOptions):
        root.obj = GlobalOptions()
    return root.obj


def workspace(ctx: typer.Context, flags: Mapping[str, Any] | None = None) -> Workspace:
    """The workspace for this command (found, not created)."""
    return Workspace.discover(path=options(ctx).workspace, env=os.environ, flags=flags)
