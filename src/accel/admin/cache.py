"""The cache entries of a workspace as ``accel cache list`` reports them.

Each ``*.entry`` folder is read by the one reader of ``meta.json``
(:func:`accel.store.entry.read_cache_meta`): what it accepts is an entry (key, kind,
size, last use, run), a folder without ``meta.json`` is ``debris`` (a put or a delete
that never finished), one whose ``meta.json`` is refused is ``unreadable`` (with the
reason). Reads only; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import IntegrityError, MetaMissing, UsageError
from accel.store.entry import CacheMeta, entry_folders, key_of, key_problem, read_cache_meta

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["CacheListing", "CacheRow", "check_prefix", "list_cache", "read_entry"]

ENTRY = "entry"
DEBRIS = "debris"
UNREADABLE = "unreadable"


@dataclass(frozen=True)
class CacheRow:
    """One entry folder; ``meta`` is None for debris and unreadable ones (``reason``)."""

    key: str
    path: Path
    meta: CacheMeta | None
    state: str = ENTRY
    reason: str | None = None

    @property
    def size(self) -> int:
        return self.meta.size if self.meta is not None else 0

    @property
    def run_id(self) -> str | None:
        return self.meta.run_id if self.meta is not None else None

    def to_json(self, now: float) -> dict[str, Any]:
        m = self.meta
        return {
            "key": self.key,
            "state": self.state,
            "kind": m.kind if m else None,
            "size": m.size if m else None,
            "created": m.created if m else None,
            "last_used": m.last_used if m else None,
            "idle_seconds": now - m.last_used if m else None,
            "run_id": m.run_id if m else None,
            "path": str(self.path),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CacheListing:
    root: Path
    now: float
    rows: tuple[CacheRow, ...]

    @property
    def entries(self) -> tuple[CacheRow, ...]:
        return tuple(r for r in self.rows if r.state == ENTRY)

    @property
    def others(self) -> tuple[CacheRow, ...]:
        return tuple(r for r in self.rows if r.state != ENTRY)

    @property
    def total_bytes(self) -> int:
        return sum(r.size for r in self.entries)

    def to_json(self) -> dict[str, Any]:
        return {
            "entries_dir": str(self.root),
            "now": self.now,
            "entries": [r.to_json(self.now) for r in self.entries],
            "total_bytes": self.total_bytes,
            "other": [r.to_json(self.now) for r in self.others],
        }


def check_prefix(prefix: str) -> str:
    """A key prefix (``datasets/`` or ``datasets/tr``) that cannot address anything
    outside the cache; UsageError otherwise."""
    stem = prefix.removesuffix("/")
    problem = key_problem(stem) if stem else "it is empty"
    if problem:
        raise UsageError(
            f"invalid --prefix {prefix!r}: {problem}; give the start of a key, e.g. datasets/"
        )
    return prefix


def read_entry(path: Path, key: str) -> CacheRow:
    try:
        return CacheRow(key, path, read_cache_meta(path, key))
    except MetaMissing:
        return CacheRow(key, path, None, DEBRIS, "no meta.json: a put or delete never finished")
    except IntegrityError as exc:
        return CacheRow(key, path, None, UNREADABLE, str(exc))


def list_cache(ws: Workspace, now: float, prefix: str | None = None) -> CacheListing:
    """Every entry folder (whose key starts with ``prefix``), by key."""
    root = ws.layout.entries_dir
    if prefix is not None:
        check_prefix(prefix)
    if not ws.identify():
        return CacheListing(root, now, ())
    rows = []
    for path in entry_folders(root):  # no store settings: read under an invalid config
        key = key_of(path, root)
        if prefix is None or key.startswith(prefix):
            rows.append(read_entry(path, key))
    return CacheListing(root, now, tuple(sorted(rows, key=lambda r: r.key)))
