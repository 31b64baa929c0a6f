"""The clean policy and the pure planner: from a scan to what to delete, and why.

No IO here: :func:`make_plan` takes a :class:`~accel.clean._items.WorkspaceScan` (which
carries ``now`` and the live runs) and returns a :class:`CleanPlan`. Tested without a
filesystem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accel.clean._items import CATEGORIES, LEFT_ALONE, UNKNOWN, Item, WorkspaceScan
from accel.errors import UsageError
from accel.units import parse_count, parse_duration, parse_size

# Crash debris younger than this may still be a write in progress.
DEBRIS_GRACE = 600.0

DEBRIS = "debris"
NOT_OURS = "unknown, left alone"  # accel cannot prove it made it: never deleted
UNREADABLE = "unreadable, left alone"  # its record is refused: never deleted
OLDER_THAN = "older_than"
KEEP_LAST = "keep_last"
MAX_SIZE = "max_size"


@dataclass(frozen=True)
class Policy:
    """What to remove. ``None`` means the selector is not used."""

    older_than: float | None = None
    keep_last: int | None = None
    max_size: int | None = None
    only: frozenset[str] = frozenset(CATEGORIES)
    explicit: bool = False
    force: bool = False  # also the files accel did not make inside what goes

    def to_json(self) -> dict[str, Any]:
        return {
            "older_than": self.older_than,
            "keep_last": self.keep_last,
            "max_size": self.max_size,
            "only": sorted(self.only),
            "force": self.force,
        }


@dataclass(frozen=True, slots=True)
class PlanItem:
    item: Item
    reason: str


@dataclass(frozen=True, slots=True)
class KeptItem:
    item: Item
    reason: str


@dataclass(frozen=True)
class CleanPlan:
    policy: Policy
    scan: WorkspaceScan
    items: tuple[PlanItem, ...]
    kept: tuple[KeptItem, ...]
    warnings: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        return sum(p.item.size for p in self.items)

    @property
    def size_after(self) -> int:
        return self.scan.total_size - self.total_bytes

    def to_json(self, *, dry_run: bool) -> dict[str, Any]:
        """What ``accel clean --json`` prints for this plan."""
        return {
            "workspace": str(self.scan.root),
            "dry_run": dry_run,
            "policy": self.policy.to_json(),
            "size_before": self.scan.total_size,
            "total_bytes": self.total_bytes,
            "items": [item_json(p.item, p.reason) for p in self.items],
            "kept": [item_json(k.item, k.reason) for k in self.kept],
            "warnings": list(self.warnings),
        }


def item_json(item: Item, reason: str) -> dict[str, Any]:
    return {
        "category": item.category,
        "kind": item.kind,
        "name": item.name,
        "path": item.location,
        "size": item.size,
        "last_used": item.last_used,
        "reason": reason,
        "foreign": list(item.foreign),
    }


def parse_policy(
    *,
    older_than: str | float | None = None,
    keep_last: str | int | None = None,
    max_size: str | int | None = None,
    only: Iterable[str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    force: bool = False,
) -> Policy:
    """Validate selectors (raising UsageError); no selector means the configured retention.

    ``defaults`` holds ``checkpoints.keep_last`` and ``cache.max_size`` of the config.
    """
    categories = _categories(only)
    explicit = any(v is not None for v in (older_than, keep_last, max_size))
    if not explicit:
        defaults = defaults or {}
        keep_last = defaults.get("checkpoints.keep_last")
        max_size = defaults.get("cache.max_size")
    return Policy(
        older_than=None if older_than is None else _duration(older_than),
        keep_last=None if keep_last is None else parse_count(keep_last, "--keep-last"),
        max_size=None if max_size is None else parse_size(max_size),
        only=categories,
        explicit=explicit,
        force=force,
    )


def _categories(only: Iterable[str] | None) -> frozenset[str]:
    chosen = list(only or ())
    for name in chosen:
        if name not in CATEGORIES:
            raise UsageError(f"invalid --only {name!r}: expected one of {', '.join(CATEGORIES)}")
    return frozenset(chosen) if chosen else frozenset(CATEGORIES)


def _duration(value: str | float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value >= 0:
            return float(value)
        raise UsageError(f"invalid --older-than {value!r}: must not be negative")
    return parse_duration(str(value))


# -- planning -----------------------------------------------------------------------------


def make_plan(scan: WorkspaceScan, policy: Policy) -> CleanPlan:
    """Decide, for every scanned item, whether it goes and why (pure)."""
    ranks = _checkpoint_ranks(scan.items)
    chosen: list[PlanItem] = []
    kept: list[KeptItem] = []
    candidates: list[Item] = []
    for item in scan.items:
        if item.category not in policy.only and not _reported_anyway(item):
            continue
        rank = ranks.get(item.location) if item.kind == "checkpoint" else None
        guard = protection(item, scan, policy, rank)
        if guard is not None:
            kept.append(KeptItem(item, guard))
            continue
        reason = _selected(item, scan, policy, rank)
        if reason is not None:
            chosen.append(PlanItem(item, reason))
        else:
            candidates.append(item)
    warnings = list(scan.warnings)
    if policy.max_size is not None:
        chosen += _evict(scan, policy.max_size, chosen, candidates, warnings)
    return CleanPlan(policy, scan, tuple(chosen), tuple(kept), tuple(warnings))


def protection(item: Item, scan: WorkspaceScan, policy: Policy, rank: int | None) -> str | None:
    """Why ``item`` must stay whatever the selectors say, or None."""
    if item.kind in LEFT_ALONE:
        return NOT_OURS if item.kind == UNKNOWN else UNREADABLE
    if item.detail is not None:  # accel's, in a folder outside the workspace
        return item.detail
    if item.run_id is not None and item.run_id in scan.live_runs:
        return "live run"
    if item.series is not None and item.series in scan.held_series:
        return "series in use"
    if item.kind == "framework" and scan.live_runs:
        return "a live run may be compiling into it"
    unrecorded = item.kind == "debris" or (item.kind == "run" and item.status is None)
    if unrecorded and scan.now - item.last_used < DEBRIS_GRACE:
        return "may be a write in progress"
    if item.kind == "checkpoint" and rank is not None:
        keep = 1 if policy.keep_last is None else policy.keep_last
        if rank < keep:
            return "newest checkpoint" if rank == 0 else f"among the last {keep}"
    return None


def _reported_anyway(item: Item) -> bool:
    """What is left alone outside the parts clean knows is shown whatever ``--only``."""
    return item.kind in LEFT_ALONE and item.category not in CATEGORIES


def _selected(item: Item, scan: WorkspaceScan, policy: Policy, rank: int | None) -> str | None:
    if item.kind == "debris":
        return DEBRIS
    old = policy.older_than is not None and scan.now - item.last_used >= policy.older_than
    if item.kind == "checkpoint" and policy.keep_last is not None:
        # Both selectors: a checkpoint beyond the last N goes only once it is also old.
        return KEEP_LAST if policy.older_than is None or old else None
    return OLDER_THAN if old else None


def _evict(
    scan: WorkspaceScan,
    budget: int,
    chosen: list[PlanItem],
    candidates: list[Item],
    warnings: list[str],
) -> list[PlanItem]:
    """Least recently used first, until the workspace fits in ``budget`` bytes."""
    size = scan.total_size - sum(p.item.size for p in chosen)
    evicted: list[PlanItem] = []
    for item in sorted(candidates, key=lambda i: (i.last_used, i.location)):
        if size <= budget:
            break
        evicted.append(PlanItem(item, MAX_SIZE))
        size -= item.size
    if size > budget:
        warnings.append(
            f"the workspace stays over --max-size ({size} > {budget} bytes): "
            "the rest is protected or outside --only"
        )
    return evicted


def _checkpoint_ranks(items: Iterable[Item]) -> dict[str, int]:
    """0 for the newest committed checkpoint of each series (by step), 1 for the next..."""
    by_series: dict[str, list[Item]] = {}
    for item in items:
        if item.kind == "checkpoint" and item.series is not None:
            by_series.setdefault(item.series, []).append(item)
    ranks: dict[str, int] = {}
    for series_items in by_series.values():
        series_items.sort(key=lambda i: i.step or 0, reverse=True)
        ranks.update({i.location: n for n, i in enumerate(series_items)})
    return ranks
