"""``accel checkpoints rm`` and ``accel cache rm``: plan, then execute.

Planning reads only and refuses what must not go:

- a checkpoint while a live process holds its series' lease (a run saving into it,
  which may resume from any of its checkpoints) -- whatever the flags;
- the newest committed checkpoint of a series, unless ``force``: a restarted run
  resumes from it;
- a step folder whose manifest is refused (unreadable): accel never deletes what it
  cannot read as its own.

Execution re-checks at the moment of removal with the protocols that already guard
``accel clean`` and the cache: checkpoints through :func:`accel.clean.execute` (under
the series lease, a checkpoint re-saved since the plan is kept, renamed aside durably
before a file goes, its manifest last, never following a link); cache entries through
:meth:`accel.store.cache.Cache.delete` (under the cache lock, only folders accel made).
An entry or checkpoint last used by a live run is kept and reported.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel import layout
from accel._locks import held as lock_held
from accel.admin.cache import DEBRIS, CacheRow, check_prefix, list_cache, read_entry
from accel.admin.catalog import find_checkpoint
from accel.clean import Bounds, Item, checkpoint_item, kept_reason
from accel.errors import AccelError, LeaseHeld, UsageError
from accel.runs import is_live
from accel.store import entry as entry_mod
from accel.store import series as series_mod
from accel.store.entry import check_key
from accel.store.lease import read_holder

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = [
    "Kept",
    "Removal",
    "RemovalPlan",
    "RemovalResult",
    "checkpoint_refusal",
    "plan_cache_removal",
    "plan_checkpoint_removal",
    "remove",
]

CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class Removal:
    """One thing to remove: ``kind`` is checkpoint, entry, or a cache entry's state
    (debris, unreadable); ``name`` is ``series/step-N`` or the key."""

    kind: str
    name: str
    path: Path
    size: int
    last_used: float | None
    run_id: str | None
    item: Item | None = dataclasses.field(default=None, compare=False, repr=False)
    foreign: tuple[str, ...] = ()  # files in it that accel did not make: kept unless forced

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "path": str(self.path),
            "size": self.size,
            "last_used": self.last_used,
            "run_id": self.run_id,
            "foreign": list(self.foreign),
        }


@dataclass(frozen=True)
class Kept:
    removal: Removal
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {**self.removal.to_json(), "reason": self.reason}


@dataclass(frozen=True)
class RemovalPlan:
    part: str  # "checkpoints" or "cache"
    items: tuple[Removal, ...]
    kept: tuple[Kept, ...] = ()
    force: bool = False  # the files accel did not make inside them go too

    @property
    def total_bytes(self) -> int:
        return sum(r.size for r in self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "items": [r.to_json() for r in self.items],
            "kept": [k.to_json() for k in self.kept],
            "total_bytes": self.total_bytes,
            "force": self.force,
        }


@dataclass(frozen=True)
class RemovalResult:
    plan: RemovalPlan
    removed: tuple[Removal, ...]
    kept: tuple[Kept, ...]

    @property
    def freed_bytes(self) -> int:
        return sum(r.size for r in self.removed)

    @property
    def ok(self) -> bool:
        """Everything planned went (what planning kept counts as not removed)."""
        return not self.kept

    def to_json(self) -> dict[str, Any]:
        return {
            **self.plan.to_json(),
            "removed": [r.to_json() for r in self.removed],
            "kept": [k.to_json() for k in self.kept],
            "freed_bytes": self.freed_bytes,
        }


# -- checkpoints ------------------------------------------------------------------------------


def checkpoint_refusal(
    series: str, step: int, newest: int, *, force: bool, holder: str | None
) -> AccelError | None:
    """Why step ``step`` of ``series`` must stay (pure): held, or the newest."""
    if holder is not None:
        return LeaseHeld(
            f"checkpoint series {series!r} is held by {holder}: a live run may resume from "
            "any of its checkpoints; wait for it to end (not even --force removes one now)"
        )
    if step == newest and not force:
        return UsageError(
            f"step {step} is the newest checkpoint of series {series!r}: a restarted run "
            "resumes from it; pass --force to remove it anyway"
        )
    return None


def plan_checkpoint_removal(
    ws: Workspace, step: int, series: str | None, *, force: bool = False
) -> RemovalPlan:
    found = find_checkpoint(ws, step, series)
    name = found.path.parent.name
    view = series_mod.view(found.path.parent)
    newest = view.checkpoints[-1].manifest.step
    refusal = checkpoint_refusal(name, step, newest, force=force, holder=_holder(ws, name))
    if refusal is not None:
        raise refusal
    foreign = tuple(series_mod.foreign_in(found))
    item = checkpoint_item(name, found)._replace(foreign=foreign)
    m = found.manifest
    removal = Removal(CHECKPOINT, item.name, found.path, m.size, m.created, m.run_id, item, foreign)
    out = Bounds.of(ws.data_path).problem(found.path.parent)  # as `accel clean` plans
    if out is not None:
        return RemovalPlan("checkpoints", (), (Kept(removal, out),), force=force)
    return RemovalPlan("checkpoints", (removal,), force=force)


def _holder(ws: Workspace, series: str) -> str | None:
    """Who holds ``series``' lease now, in words; None when nobody does."""
    if not lock_held(layout.series_lock(ws.path, series)):
        return None
    holder = read_holder(ws.layout, series)
    if holder is None:
        return "another process"
    run = f" (run {holder.run_id})" if holder.run_id else ""
    return f"pid {holder.pid} on {holder.host}{run}"


# -- cache ------------------------------------------------------------------------------------


def plan_cache_removal(
    ws: Workspace,
    key: str | None,
    prefix: str | None,
    now: float | None = None,
    *,
    force: bool = False,
) -> RemovalPlan:
    """The entries ``key`` (exactly) or ``prefix`` (every key starting with it) name.

    UsageError for an invalid key or prefix, for both or neither, and for a key that
    has no entry. A prefix that matches nothing plans nothing.
    """
    if (key is None) == (prefix is None):
        raise UsageError("give a KEY or --prefix PREFIX (one of them)")
    when = time.time() if now is None else now
    if key is not None:
        rows: tuple[CacheRow, ...] = (_one_entry(ws, check_key(key)),)
    else:
        rows = list_cache(ws, when, check_prefix(str(prefix))).rows
    live = {r.run_id for r in rows if r.run_id is not None and is_live(ws.layout, r.run_id)}
    items, kept = [], []
    for row in rows:
        removal = _entry_removal(row)
        if row.run_id in live:
            kept.append(Kept(removal, f"used by the live run {row.run_id}"))
        else:
            items.append(removal)
    return RemovalPlan("cache", tuple(items), tuple(kept), force)


def _one_entry(ws: Workspace, key: str) -> CacheRow:
    path = ws.cache.entry_dir(key)
    if not ws.identify() or not os.path.lexists(path):
        raise UsageError(f"no cache entry {key!r}; `accel cache list` shows the keys")
    real_root, real = os.path.realpath(ws.cache.root), os.path.realpath(path.parent)
    if os.path.commonpath([real_root, real]) != real_root:
        raise UsageError(f"{path.parent} is a link out of the cache; accel does not follow it")
    if os.path.islink(path) or not os.path.isdir(path):
        raise UsageError(f"{path} is not a cache entry accel made; it is left alone")
    row = read_entry(path, key)
    if row.state == DEBRIS and not layout.is_owned(path):
        raise UsageError(f"{path} is not a cache entry accel made; it is left alone")
    return row


def _entry_removal(row: CacheRow) -> Removal:
    m = row.meta
    foreign = tuple(entry_mod.foreign_in_entry(row.path, m.payload if m else None))
    used = m.last_used if m else None
    return Removal(row.state, row.key, row.path, row.size, used, row.run_id, foreign=foreign)


# -- execution --------------------------------------------------------------------------------


def remove(ws: Workspace, plan: RemovalPlan) -> RemovalResult:
    """Carry out ``plan`` (re-checking everything at the moment of removal)."""
    if plan.part == "checkpoints":
        removed, kept = _remove_checkpoints(ws, plan)
    else:
        removed, kept = _remove_entries(ws, plan)
    result = RemovalResult(plan, removed, plan.kept + kept)
    _log(ws, result)
    return result


def _remove_checkpoints(
    ws: Workspace, plan: RemovalPlan
) -> tuple[tuple[Removal, ...], tuple[Kept, ...]]:
    from accel.clean import CleanPlan, PlanItem, Policy, WorkspaceScan, execute

    items = tuple(r.item for r in plan.items if r.item is not None)
    scan = WorkspaceScan(ws.data_path, time.time(), items, 0, frozenset(), frozenset())
    chosen = tuple(PlanItem(item, "requested") for item in items)
    policy = Policy(explicit=True, force=plan.force)
    outcome = execute(ws, CleanPlan(policy, scan, chosen, (), ()))
    gone = {p.item.location for p in outcome.removed}
    why = {str(s.path): s.reason for s in outcome.skipped}
    removed = tuple(r for r in plan.items if str(r.path) in gone)
    kept = tuple(
        Kept(r, why.get(str(r.path), "not removed")) for r in plan.items if r not in removed
    )
    return removed, kept


def _remove_entries(
    ws: Workspace, plan: RemovalPlan
) -> tuple[tuple[Removal, ...], tuple[Kept, ...]]:
    removed, kept = [], []
    for removal in plan.items:
        if removal.run_id is not None and is_live(ws.layout, removal.run_id):
            kept.append(Kept(removal, f"used by the live run {removal.run_id}"))
            continue
        ws.cache.delete(removal.name, force=plan.force)
        foreign = [] if plan.force else entry_mod.foreign_in_entry(removal.path, None)
        if os.path.lexists(removal.path) and foreign:
            kept.append(Kept(removal, kept_reason(foreign)))
        elif os.path.lexists(removal.path):
            kept.append(Kept(removal, "not removed: not a folder accel made, or outside the cache"))
        else:
            removed.append(removal)
    return tuple(removed), tuple(kept)


def _log(ws: Workspace, result: RemovalResult) -> None:
    if not result.removed:
        return
    names = ", ".join(r.name for r in result.removed[:5])
    more = f" and {len(result.removed) - 5} more" if len(result.removed) > 5 else ""
    ws.log(
        f"removed {len(result.removed)} item(s) ({names}{more}), freed {result.freed_bytes} bytes",
        command=f"accel {result.plan.part} rm",
    )
