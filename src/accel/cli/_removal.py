"""What ``accel checkpoints rm`` and ``accel cache rm`` share: show the plan, ask, remove,
show what happened. Plan first; ``--dry-run`` stops after showing it; without a
terminal nothing is removed unless ``--yes`` says so."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from accel.cli import _output

if TYPE_CHECKING:
    from accel.admin.remove import RemovalPlan, RemovalResult
    from accel.workspace import Workspace


def carry_out(ws: Workspace, plan: RemovalPlan, *, yes: bool, dry_run: bool, as_json: bool) -> int:
    """0 when everything planned is gone (or would be, on a dry run), 1 when something
    was kept, 2 when the user must confirm and cannot."""
    from accel.admin.remove import remove
    from accel.errors import UsageError

    if dry_run or not plan.items:
        _show_plan(plan, as_json, dry_run=True)
        return 1 if plan.kept and not dry_run else 0
    if not yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("not a terminal: pass --yes to remove (or --dry-run to see the plan)")
        _show_plan(plan, False, dry_run=False)
        if not _output.confirm(f"Remove {len(plan.items)} item(s)?"):
            _output.out("nothing removed")
            return 1
    result = remove(ws, plan)
    _show_result(result, as_json)
    return 0 if result.ok else 1


def _show_plan(plan: RemovalPlan, as_json: bool, *, dry_run: bool) -> None:
    from accel.units import format_size

    if as_json:
        _output.print_json({**plan.to_json(), "dry_run": dry_run})
        return
    for kept in plan.kept:
        _output.warn(f"keeping {kept.removal.name}: {kept.reason}")
    if not plan.items:
        _output.out("nothing to remove")
        return
    now = time.time()
    rows = [_row(r, now) for r in plan.items]
    _output.table(
        "Would remove" if dry_run else "To remove",
        ["kind", "name", "size", "last used", "run"],
        rows,
    )
    for removal in plan.items:
        if removal.foreign:
            _output.warn(foreign_line(removal.name, removal.foreign, plan.force))
    verb = "would free" if dry_run else "to free"
    _output.out(f"{verb} {format_size(plan.total_bytes)} in {len(plan.items)} item(s)")


def _show_result(result: RemovalResult, as_json: bool) -> None:
    from accel.units import format_size

    if as_json:
        _output.print_json({**result.to_json(), "dry_run": False})
        return
    for kept in result.kept:
        _output.warn(f"kept {kept.removal.name}: {kept.reason}")
    _output.out(
        f"removed {len(result.removed)} item(s), freed {format_size(result.freed_bytes)}"
        + (f"; {len(result.kept)} kept" if result.kept else "")
    )


def _row(removal: Any, now: float) -> list[str]:
    from accel.units import ago, format_size

    return [
        removal.kind,
        removal.name,
        format_size(removal.size),
        ago(now, removal.last_used),
        removal.run_id or "",
    ]


def foreign_line(name: str, foreign: tuple[str, ...], force: bool) -> str:
    """What a plan does with the files accel did not make inside ``name``."""
    from accel.clean import describe_foreign

    if force:
        return f"{name} holds {describe_foreign(foreign)}: --force removes them too"
    return (
        f"{name} holds {describe_foreign(foreign)}: they stay, with the folder; "
        "only accel's files go (--force removes them too)"
    )
