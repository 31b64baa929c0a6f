"""The automatic size budget (``cache.max_size``), like ``git gc --auto``.

``accel launch`` calls :func:`after_run` when a run ends and ``accel clean --auto`` calls
:func:`check` on demand. Under budget it is a quick no-op: one walk of the workspace summing sizes,
nothing read, nothing locked, nothing logged (and no walk at all when no budget is
set). Over budget, it plans with the clean planner — least recently used first, cache
entries, framework caches and finished runs' logs, never live runs, never checkpoints
(``checkpoints.keep_last`` governs those), never the config or the store — executes
that plan under the clean lock, and logs what it did to ``logs/training.log``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accel._fs import tree_size

if TYPE_CHECKING:
    from accel.clean import CleanPlan, Policy
    from accel.workspace import Workspace

__all__ = [
    "OFF",
    "OVER",
    "TRIMMED",
    "UNDER",
    "BudgetResult",
    "after_run",
    "auto_policy",
    "check",
]

OFF = "off"  # no cache.max_size
UNDER = "under"  # fits: nothing done
TRIMMED = "trimmed"  # evicted until it fits
OVER = "over"  # still over: the rest is protected (live, checkpoints, config)
PROTECTED = frozenset({"checkpoints"})


@dataclass(frozen=True)
class BudgetResult:
    action: str
    max_size: int | None
    size_before: int
    size_after: int
    removed: int = 0
    freed: int = 0
    kept_in_use: int = 0
    dry_run: bool = False
    seconds: float = 0.0
    plan: CleanPlan | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "max_size": self.max_size,
            "size_before": self.size_before,
            "size_after": self.size_after,
            "removed": self.removed,
            "freed": self.freed,
            "kept_in_use": self.kept_in_use,
            "dry_run": self.dry_run,
            "seconds": round(self.seconds, 4),
        }


def auto_policy(max_size: int) -> Policy:
    """Evict LRU from every category but checkpoints until the workspace fits."""
    from accel.clean import CATEGORIES, Policy

    only = frozenset(c for c in CATEGORIES if c not in PROTECTED)
    return Policy(max_size=max_size, only=only, explicit=True)


def quick_size(ws: Workspace) -> int:
    """Bytes of the workspace (its data folder, plus config and locks when relocated)."""
    size = tree_size(ws.data_path)
    if ws.data_path != ws.path:
        size += tree_size(ws.path)
    return size


def check(
    ws: Workspace,
    *,
    max_size: int | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> BudgetResult:
    """Fit the workspace into ``max_size`` (default ``cache.max_size``); see the module doc."""
    started = time.perf_counter()
    budget = ws.settings.cache.max_size if max_size is None else max_size
    if budget is None or not ws.exists:
        return BudgetResult(OFF, budget, 0, 0, seconds=time.perf_counter() - started)
    size = quick_size(ws)
    if size <= budget:
        return BudgetResult(UNDER, budget, size, size, seconds=time.perf_counter() - started)
    return _trim(ws, budget, size, dry_run, now, started)


def after_run(ws: Workspace, interrupted: bool) -> BudgetResult | None:
    """The budget when a run ends: a quick no-op under it; None when not checked.

    Called after the run lock is released, so framework caches count as idle; never
    after an interrupt (the user wants out). A failure here must never change the run's
    exit code: it is raised for the caller to report as a warning.
    """
    return None if interrupted else check(ws)


def _trim(
    ws: Workspace, budget: int, size: int, dry_run: bool, now: float | None, started: float
) -> BudgetResult:
    from accel.clean import execute, plan_for

    plan = plan_for(ws, auto_policy(budget), now)
    if dry_run:
        return _result(budget, size, plan.size_after, plan, started, dry_run=True)
    result = execute(ws, plan)
    outcome = _result(
        budget,
        size,
        quick_size(ws),
        plan,
        started,
        removed=len(result.removed),
        freed=result.freed_bytes,
        kept_in_use=len(result.skipped),
    )
    _log(ws, outcome)
    return outcome


def _result(
    budget: int,
    before: int,
    after: int,
    plan: CleanPlan,
    started: float,
    *,
    dry_run: bool = False,
    removed: int | None = None,
    freed: int | None = None,
    kept_in_use: int = 0,
) -> BudgetResult:
    return BudgetResult(
        action=TRIMMED if after <= budget else OVER,
        max_size=budget,
        size_before=before,
        size_after=after,
        removed=len(plan.items) if removed is None else removed,
        freed=plan.total_bytes if freed is None else freed,
        kept_in_use=kept_in_use,
        dry_run=dry_run,
        seconds=time.perf_counter() - started,
        plan=plan,
    )


def _log(ws: Workspace, outcome: BudgetResult) -> None:
    text = (
        f"size budget: workspace {outcome.size_before} bytes > cache.max_size "
        f"{outcome.max_size}: removed {outcome.removed} item(s), freed {outcome.freed} bytes, "
        f"now {outcome.size_after} bytes"
    )
    if outcome.action == OVER:
        text += " (still over: the rest is checkpoints, live runs or the config)"
    ws.log(text, "info" if outcome.action == TRIMMED else "warning", command="budget")
