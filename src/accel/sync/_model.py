"""The values sync passes around: frozen dataclasses of raw numbers, no IO."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

PUSH = "push"
PULL = "pull"

CHECKPOINT = "checkpoint"
RUN = "run"
CONFIG = "config"
CACHE = "cache"


@dataclass(frozen=True)
class FileEntry:
    """What the remote index records for one file."""

    size: int
    checksum: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "checksum": self.checksum}


@dataclass(frozen=True)
class LocalFile:
    """A file of the workspace that sync may move. ``rel`` is its remote path.

    ``checksum`` is None until it was needed: a file the remote lacks, or holds with
    another size, is hashed while it streams instead of in a pass of its own.
    """

    rel: str
    path: Path
    size: int
    checksum: str | None
    unit: str
    kind: str


@dataclass(frozen=True)
class Transfer:
    """One file to move, in the order the plan moves it (commit markers last per unit)."""

    rel: str
    local: Path
    size: int
    checksum: str | None
    unit: str
    kind: str
    reason: str  # "new" | "changed"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.rel, "size": self.size, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Skipped:
    """A unit (checkpoint, run, file) left alone, and why. ``blocking``: a committed
    checkpoint sync could not move (the result is then not ``ok``); the rest (a save in
    progress, a live run, a file kept local) is left alone on purpose."""

    unit: str
    reason: str
    blocking: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "reason": self.reason, "blocking": self.blocking}


@dataclass(frozen=True)
class SyncPlan:
    """``skipped``: units left alone (exit 0, but 1 when one is ``blocking``: a
    checkpoint that did not move); ``refused``: what the remote holds that a pull may not
    bring in (unknown files and places, a live series): exit 1."""

    direction: str
    transfers: tuple[Transfer, ...]
    skipped: tuple[Skipped, ...] = ()
    unchanged: int = 0
    refused: tuple[Skipped, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(t.size for t in self.transfers)

    def units(self) -> list[tuple[str, list[Transfer]]]:
        """The transfers grouped by unit, in plan order."""
        groups: dict[str, list[Transfer]] = {}
        for t in self.transfers:
            groups.setdefault(t.unit, []).append(t)
        return list(groups.items())


@dataclass(frozen=True)
class SyncResult:
    plan: SyncPlan
    url: str
    dry_run: bool
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    failed: tuple[Skipped, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        blocked = any(s.blocking for s in self.plan.skipped)
        return not self.failed and not self.plan.refused and not blocked

    def to_json(self) -> dict[str, Any]:
        return {
            "direction": self.plan.direction,
            "url": self.url,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "planned_files": len(self.plan.transfers),
            "planned_bytes": self.plan.total_bytes,
            "transferred_files": self.files,
            "transferred_bytes": self.bytes,
            "unchanged_files": self.plan.unchanged,
            "seconds": round(self.seconds, 3),
            "transfers": [t.to_json() for t in self.plan.transfers],
            "skipped": [s.to_json() for s in self.plan.skipped],
            "refused": [s.to_json() for s in self.plan.refused],
            "failed": [s.to_json() for s in self.failed],
        }


class Reporter(Protocol):
    """Where progress goes: a rich bar in the CLI, nothing in the library."""

    def begin(self, total_bytes: int, total_files: int) -> None: ...

    def advance(self, num_bytes: int) -> None: ...

    def end(self) -> None: ...


class NullReporter:
    def begin(self, total_bytes: int, total_files: int) -> None:
        pass

    def advance(self, num_bytes: int) -> None:
        pass

    def end(self) -> None:
        pass


Index = Mapping[str, FileEntry]
