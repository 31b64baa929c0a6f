"""``accel clean``: scan, plan (pure), show, execute.

The Python twin of the command is :func:`clean`::

    outcome = clean(ws, older_than="7d", dry_run=True)
    outcome.plan.total_bytes   # what would be freed

:func:`clean_cache` is ``accel clean --only cache --older-than ...`` (and what
``Accelerator.clean_cache`` calls): the one rule for what a cache clean may remove.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accel.clean._foreign import describe_foreign, kept_reason
from accel.clean._items import CATEGORIES, LEFT_ALONE, Item, WorkspaceScan
from accel.clean._live import held_series
from accel.clean._plan import (
    DEBRIS_GRACE,
    CleanPlan,
    KeptItem,
    PlanItem,
    Policy,
    make_plan,
    parse_policy,
    protection,
)
from accel.clean._proof import Bounds
from accel.clean._scan import checkpoint_item, scan
from accel.clean._walk import Tree
from accel.workspace import Workspace

if TYPE_CHECKING:
    from accel.clean._execute import CleanResult, Skipped, execute
    from accel.store.cache import CacheEntryInfo

__all__ = [
    "CATEGORIES",
    "DEBRIS_GRACE",
    "LEFT_ALONE",
    "Bounds",
    "CleanOutcome",
    "CleanPlan",
    "CleanResult",
    "Item",
    "KeptItem",
    "PlanItem",
    "Policy",
    "Skipped",
    "Tree",
    "WorkspaceScan",
    "checkpoint_item",
    "clean",
    "clean_cache",
    "describe_foreign",
    "execute",
    "held_series",
    "kept_reason",
    "log_result",
    "make_plan",
    "parse_policy",
    "plan_for",
    "policy_for",
    "protection",
    "scan",
]


_LAZY = ("CleanResult", "Skipped", "execute")


def __getattr__(name: str) -> Any:
    # A dry run (and `accel status`) never needs the deleting half: import it on use.
    if name in _LAZY:
        from accel.clean import _execute

        return getattr(_execute, name)
    raise AttributeError(f"module 'accel.clean' has no attribute {name!r}")


@dataclass(frozen=True)
class CleanOutcome:
    plan: CleanPlan
    result: CleanResult | None  # None on a dry run

    def to_json(self, *, dry_run: bool) -> dict[str, Any]:
        """What ``accel clean --json`` prints: the plan and, once executed, its result."""
        data = self.plan.to_json(dry_run=dry_run)
        if self.result is not None:
            data.update(self.result.to_json())
        return data


def plan_for(ws: Workspace, policy: Policy, now: float | None = None) -> CleanPlan:
    """Scan ``ws`` and plan ``policy`` against it, naming the files accel did not make
    inside what goes (reads only)."""
    from accel.clean._foreign import annotate

    return annotate(make_plan(scan(ws, time.time() if now is None else now), policy))


def clean(
    ws: Workspace,
    *,
    older_than: str | float | None = None,
    keep_last: int | str | None = None,
    max_size: str | int | None = None,
    only: Iterable[str] | None = None,
    dry_run: bool = False,
    now: float | None = None,
    force: bool = False,
) -> CleanOutcome:
    """Plan, and unless ``dry_run`` execute, a clean of ``ws``.

    Without selectors the configured retention applies (``checkpoints.keep_last``,
    ``cache.max_size``) plus crash debris. Files accel did not make inside what goes keep
    their folders unless ``force``. Raises UsageError for a bad selector.
    """
    policy = policy_for(
        ws, older_than=older_than, keep_last=keep_last, max_size=max_size, only=only, force=force
    )
    plan = plan_for(ws, policy, now)
    if dry_run:
        return CleanOutcome(plan, None)
    from accel.clean._execute import CleanResult, execute

    if not plan.items:  # executed: nothing to remove, nothing freed
        return CleanOutcome(plan, CleanResult((), (), 0))

    result = execute(ws, plan)
    log_result(ws, result)
    return CleanOutcome(plan, result)


def clean_cache(
    ws: Workspace, older_than: str | float | None = None, *, now: float | None = None
) -> list[CacheEntryInfo]:
    """``accel clean --only cache --older-than older_than`` (None: every entry), its plan
    and its protections (a live run's entries stay); returns the entries removed."""
    policy = policy_for(ws, older_than=0.0 if older_than is None else older_than, only=["cache"])
    plan = plan_for(ws, policy, now)
    if not plan.items:
        return []
    entries = [p.item for p in plan.items if p.item.kind == "entry"]
    infos = {item.location: ws.cache.info(item.name) for item in entries}
    from accel.clean._execute import execute

    result = execute(ws, plan)
    log_result(ws, result)
    removed = (infos.get(p.item.location) for p in result.removed)
    return [info for info in removed if info is not None]


def policy_for(
    ws: Workspace,
    *,
    older_than: str | float | None = None,
    keep_last: int | str | None = None,
    max_size: str | int | None = None,
    only: Iterable[str] | None = None,
    force: bool = False,
) -> Policy:
    """The policy for these selectors; none given means the configured retention."""
    settings = ws.settings
    return parse_policy(
        older_than=older_than,
        keep_last=keep_last,
        max_size=max_size,
        only=only,
        defaults={
            "checkpoints.keep_last": settings.checkpoints.keep_last,
            "cache.max_size": settings.cache.max_size,
        },
        force=force,
    )


def log_result(ws: Workspace, result: CleanResult) -> None:
    """One line in logs/training.log for an executed clean."""
    ws.log(
        f"clean removed {len(result.removed)} item(s), freed {result.freed_bytes} bytes"
        + (f", kept {len(result.skipped)} in use" if result.skipped else ""),
        command="accel clean",
    )
