"""What a scan of the workspace finds: frozen records of raw numbers (:class:`Item`,
:class:`WorkspaceScan`) and the names of their categories and kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from accel.layout import CACHE_META

__all__ = [
    "CATEGORIES",
    "FRAMEWORKS",
    "LEFT_ALONE",
    "META",
    "UNKNOWN",
    "UNREADABLE",
    "Item",
    "WorkspaceScan",
]

CATEGORIES = ("cache", "checkpoints", "frameworks", "logs", "runs")
FRAMEWORKS = "frameworks"  # cache/frameworks/<name>/: torch.compile's caches (accel.frameworks)
META = CACHE_META
UNKNOWN = "unknown"  # not made by accel: left alone
UNREADABLE = "unreadable"  # accel's name, but its record is refused: left alone
LEFT_ALONE = frozenset({UNKNOWN, UNREADABLE})


class Item(NamedTuple):
    """One thing found. ``kind`` is entry, checkpoint, framework, run, log, debris (all
    removable) or unknown, unreadable (never removed); ``last_used`` is a unix time;
    ``marker`` the file that proves accel made it; ``detail`` why it is left alone
    (unreadable, or in a folder outside the workspace: then it stays whatever its kind).

    Immutable like a frozen dataclass, and three times cheaper to build: a scan makes
    one per cache entry, 100,000 of them in a large workspace.
    """

    category: str
    kind: str
    location: str
    size: int
    last_used: float
    marker: str | None = None
    name: str = ""
    series: str | None = None
    step: int | None = None
    run_id: str | None = None
    status: str | None = None
    detail: str | None = None
    foreign: tuple[str, ...] = ()  # files inside it that accel did not make (named by a plan)
    payload: str | None = None  # of a cache entry: the payload its meta.json named at the scan

    @property
    def path(self) -> Path:
        return Path(self.location)

    @property
    def left_alone(self) -> bool:
        """Never removed, whatever the selectors: not accel's, unreadable, or in a folder
        outside the workspace (``detail`` says why)."""
        return self.kind in LEFT_ALONE or self.detail is not None


@dataclass(frozen=True)
class WorkspaceScan:
    """Everything found, with the facts the planner needs (no IO after this)."""

    root: Path
    now: float
    items: tuple[Item, ...]
    other_size: int
    live_runs: frozenset[str]
    held_series: frozenset[str]
    warnings: tuple[str, ...] = ()

    @property
    def total_size(self) -> int:
        return self.other_size + sum(i.size for i in self.items)

    @property
    def left_alone(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.left_alone)
