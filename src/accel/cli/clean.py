"""``accel clean``: plan what to remove, show it, then (unless ``--dry-run``) remove it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _output

if TYPE_CHECKING:
    from accel.clean import CleanPlan, CleanResult, Policy
    from accel.workspace import Workspace


def clean(
    ctx: typer.Context,
    older_than: str | None = typer.Option(
        None, "--older-than", metavar="DURATION", help="Remove what was last used before, e.g. 7d."
    ),
    keep_last: str | None = typer.Option(
        None, "--keep-last", metavar="N", help="Checkpoints kept per series (newest by step)."
    ),
    max_size: str | None = typer.Option(
        None, "--max-size", metavar="SIZE", help="Evict least recently used until it fits."
    ),
    only: list[str] | None = typer.Option(
        None,
        "--only",
        metavar="PART",
        help="cache, checkpoints, frameworks, logs or runs (repeatable).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Show the plan and stop."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before removing."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for machines."),
    force: bool = typer.Option(
        False, "--force", help="Also files accel did not make inside the folders it removes."
    ),
    auto: bool = typer.Option(
        False, "--auto", help="Only if over cache.max_size: evict until it fits (no prompt)."
    ),
) -> int:
    """Remove old or oversized state; never what a live run holds.

    Without selectors, applies the configured retention (checkpoints.keep_last,
    cache.max_size) and removes crash debris. --auto is the quick check `accel launch`
    runs after each run: nothing unless the workspace is over cache.max_size.
    """
    from accel.clean import log_result, plan_for, policy_for

    ws = _app.workspace(ctx)
    ws.identify()  # a folder accel did not make is refused before anything is planned
    _app.heal_runs(ws)
    if auto:
        return _auto(ws, (older_than, keep_last, max_size, only), dry_run, as_json)
    policy = policy_for(
        ws, older_than=older_than, keep_last=keep_last, max_size=max_size, only=only, force=force
    )
    plan = plan_for(ws, policy)
    for warning in plan.warnings:
        _output.warn(warning)
    if dry_run or not plan.items:
        _show_plan(plan, as_json, dry_run=True, list_left_alone=dry_run)
        return 0
    if not _confirmed(plan, policy, yes):
        return 1 if _interactive() else 2
    from accel.clean import execute

    result = execute(ws, plan)
    log_result(ws, result)
    _show_result(plan, result, as_json)
    return 0


def _auto(ws: Workspace, selectors: tuple[Any, ...], dry_run: bool, as_json: bool) -> int:
    """``--auto``: the size budget (:mod:`accel.clean.budget`), like ``git gc --auto``."""
    from accel.clean import CleanOutcome
    from accel.clean.budget import OFF, OVER, UNDER, check
    from accel.errors import UsageError
    from accel.units import format_size

    if any(selectors):
        raise UsageError("--auto uses cache.max_size; drop the other selectors")
    result = check(ws, dry_run=dry_run)
    if as_json:
        data = {"auto": result.to_json()}
        if result.plan is not None:
            data.update(CleanOutcome(result.plan, None).to_json(dry_run=dry_run))
        _output.print_json(data)
        return 0
    if result.action == OFF:
        _output.out("no cache.max_size set: nothing to do")
    elif result.action == UNDER:
        _output.out(
            f"{format_size(result.size_before)} fits cache.max_size "
            f"{format_size(result.max_size or 0)}: nothing to do"
        )
    else:
        if result.plan is not None and dry_run:
            _show_plan(result.plan, False, dry_run=True)
        verb = "would free" if dry_run else "freed"
        _output.out(
            f"{verb} {format_size(result.freed)} in {result.removed} item(s): "
            f"{format_size(result.size_before)} -> {format_size(result.size_after)} "
            f"(cache.max_size {format_size(result.max_size or 0)})"
        )
    if result.action == OVER:
        _output.warn("still over cache.max_size: the rest is checkpoints, live runs or config")
    return 0


def _confirmed(plan: CleanPlan, policy: Policy, yes: bool) -> bool:
    if yes:
        return True
    if _interactive():
        _show_plan(plan, False, dry_run=False)
        return _output.confirm(f"Remove {len(plan.items)} item(s)?")
    if policy.explicit:
        return True
    _output.error(
        "not a terminal: pass --yes to apply the configured retention, "
        "or a selector (--older-than, --keep-last, --max-size)"
    )
    return False


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _show_plan(
    plan: CleanPlan, as_json: bool, *, dry_run: bool, list_left_alone: bool = True
) -> None:
    from accel.clean import CleanOutcome
    from accel.units import format_size

    if as_json:
        _output.print_json(CleanOutcome(plan, None).to_json(dry_run=dry_run))
        return
    _show_left_alone(plan, dry_run and list_left_alone)
    if not plan.items:
        _output.out("nothing to clean")
        return
    title = "Would remove" if dry_run else "To remove"
    columns = ["part", "item", "size", "last used", "why"]
    reasons = REASONS if plan.policy.explicit else CONFIGURED
    rows = [_row(p.item, reasons.get(p.reason, p.reason), plan.scan.now) for p in plan.items]
    _output.table(title, columns, rows)
    from accel.cli._removal import foreign_line

    for planned in plan.items:
        if planned.item.foreign:
            _output.warn(
                foreign_line(planned.item.location, planned.item.foreign, plan.policy.force)
            )
    _output.out(
        f"{'would free' if dry_run else 'to free'} {format_size(plan.total_bytes)} "
        f"in {len(plan.items)} item(s)"
    )


def _show_left_alone(plan: CleanPlan, dry_run: bool) -> None:
    """What accel found but may not remove: named, so nobody wonders about it."""
    from accel.units import format_size

    alone = [k.item for k in plan.kept if k.item.left_alone]
    if not alone:
        return
    if not dry_run:
        _output.warn(
            f"left alone {len(alone)} item(s) accel did not make, cannot read or may not touch "
            "(`accel clean --dry-run` lists them)"
        )
        return
    rows = [[i.location, format_size(i.size), i.detail or "not made by accel"] for i in alone]
    _output.table("Left alone (never removed)", ["path", "size", "why"], rows, plain=True)


def _show_result(plan: CleanPlan, result: CleanResult, as_json: bool) -> None:
    from accel.clean import CleanOutcome
    from accel.units import format_size

    if as_json:
        _output.print_json(CleanOutcome(plan, result).to_json(dry_run=False))
        return
    for skipped in result.skipped:
        _output.warn(f"kept {skipped.path}: {skipped.reason}")
    _output.out(
        f"freed {format_size(result.freed_bytes)} in {len(result.removed)} item(s)"
        + (f", {len(result.skipped)} kept" if result.skipped else "")
    )


def _row(item: Any, reason: str, now: float) -> list[str]:
    from accel.units import ago, format_size

    return [
        item.category,
        item.name or os.path.basename(item.location),
        format_size(item.size),
        ago(now, item.last_used, coarse=True),
        reason,
    ]


REASONS = {
    "debris": "crash debris",
    "older_than": "older than --older-than",
    "keep_last": "beyond --keep-last",
    "max_size": "least recently used (--max-size)",
}
# Without selectors (and under --auto) the limits are the project file's.
CONFIGURED = {
    **REASONS,
    "keep_last": "beyond checkpoints.keep_last",
    "max_size": "least recently used (cache.max_size)",
}
