"""What the workspace holds, measured: the data behind ``accel status``.

Reads only, never imports torch. Sizes are raw bytes; formatting is the CLI's job.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from accel.errors import AccelError, WorkspaceError
from accel.frameworks import FrameworkCache, scan_framework_caches
from accel.layout import CACHE_DIR, CHECKPOINTS_DIR, CONFIG_DIR, LOGS_DIR, RUNS_DIR, STATE_FILE
from accel.workspace import Workspace

if TYPE_CHECKING:
    from accel.clean import Item, Tree, WorkspaceScan

TOP = 5


@dataclass(frozen=True)
class PartSize:
    name: str
    path: Path
    size: int


@dataclass(frozen=True)
class StatusItem:
    """One cache entry, checkpoint, run, log or piece of debris, for largest/oldest."""

    category: str
    kind: str
    name: str
    path: Path
    size: int
    last_used: float
    detail: str | None = None  # why an unknown or unreadable item is left alone


@dataclass(frozen=True)
class WorkspaceStatus:
    path: Path
    exists: bool
    layout_version: int | None
    config_file: Path
    config_error: str | None
    parts: tuple[PartSize, ...]
    live_runs: tuple[str, ...] = ()
    largest: tuple[StatusItem, ...] = ()
    oldest: tuple[StatusItem, ...] = ()
    frameworks: tuple[FrameworkCache, ...] = ()
    now: float = 0.0
    # a folder accel did not make, or whose layout.json it refuses: nothing was read
    workspace_error: str | None = None
    left_alone: tuple[StatusItem, ...] = ()  # found, but not accel's (or unreadable)
    config_fix: str | None = None  # the command that repairs config_error, where one does
    # what the clean scan found, read in the same walk as the sizes (``accel env`` judges
    # its debris); None when it did not run
    scan: WorkspaceScan | None = field(default=None, repr=False, compare=False)

    @property
    def total_size(self) -> int:
        return sum(p.size for p in self.parts)


def collect(
    ws: Workspace, *, details: bool = True, now: float | None = None, scan: bool | None = None
) -> WorkspaceStatus:
    """Measure ``ws``; ``details`` adds live runs, the largest and oldest items, and what
    is left alone. A folder accel did not make, or whose ``layout.json`` this accel
    refuses (damaged, a version none writes, a newer one), is reported, not measured.

    ``scan`` (default: ``details``) keeps the clean scan in ``WorkspaceStatus.scan``. The
    scan and the sizes come from one walk: each folder is listed once (a checkpoint
    series' folder also by its reader, and ``locks/`` by the live-run probes)."""
    from accel.clean import Tree
    from accel.clean import scan as scan_workspace
    from accel.config.resolve import config_fix

    now = time.time() if now is None else now
    try:
        ws.check_layout()
        layout = ws.layout_version()
    except AccelError as exc:  # a damaged, unknown or newer layout.json: nothing is read
        return _refused(ws, str(exc), now)
    salvaged = ws.salvage_config()  # a broken config: still show what the workspace holds
    refusal = ws.refusal()  # after the salvage: the data folder it names is checked too
    if refusal is not None:
        return _refused(ws, refusal, now)
    config_error = str(salvaged.error) if salvaged is not None else None
    fix = config_fix(ws.config_file, salvaged.error) if salvaged is not None else None
    tree = Tree(sizes=True)
    wanted = details if scan is None else scan
    try:
        found = scan_workspace(ws, now, tree=tree) if wanted and ws.exists else None
    except WorkspaceError as exc:  # a data folder that is a link to one that is gone
        return _refused(ws, str(exc), now)
    parts = _parts(ws.path, ws.data_path, tree)
    status = WorkspaceStatus(
        ws.path,
        ws.exists,
        layout,
        ws.config_file,
        config_error,
        parts,
        now=now,
        scan=found,
        config_fix=fix,
    )
    if not details or found is None:
        return status
    return _with_details(ws, status, found, tree)


def _refused(ws: Workspace, why: str, now: float) -> WorkspaceStatus:
    return WorkspaceStatus(
        ws.path, ws.exists, None, ws.config_file, None, (), now=now, workspace_error=why
    )


def _parts(path: Path, base: Path, tree: Tree) -> tuple[PartSize, ...]:
    runs = base / LOGS_DIR / RUNS_DIR
    runs_size = _size(runs, tree)  # first: the logs are measured through it
    named = (
        ("config", path / CONFIG_DIR, None),
        ("cache", base / CACHE_DIR, None),
        ("checkpoints", base / CHECKPOINTS_DIR, None),
        ("logs", base / LOGS_DIR, runs_size),
        ("runs", runs, None),
        ("state", base / STATE_FILE, None),
    )
    return tuple(PartSize(n, p, _size(p, tree) - (minus or 0)) for n, p, minus in named)


def _with_details(
    ws: Workspace, status: WorkspaceStatus, found: WorkspaceScan, tree: Tree
) -> WorkspaceStatus:
    from accel.clean import LEFT_ALONE

    ours = [i for i in found.items if i.kind not in LEFT_ALONE]
    # The first few only become StatusItems: a Path each costs more than the sort.
    largest = heapq.nsmallest(TOP, ours, key=lambda i: (-i.size, _path_key(i)))
    oldest = heapq.nsmallest(TOP, ours, key=lambda i: (i.last_used, _path_key(i)))
    left_alone = sorted((i for i in found.items if i.kind in LEFT_ALONE), key=_path_key)
    return replace(
        status,
        live_runs=tuple(sorted(found.live_runs)),
        largest=tuple(_status_item(i) for i in largest),
        oldest=tuple(_status_item(i) for i in oldest),
        frameworks=_frameworks(ws, tree),
        left_alone=tuple(_status_item(i) for i in left_alone),
    )


def _status_item(item: Item) -> StatusItem:
    return StatusItem(
        item.category, item.kind, item.name, item.path, item.size, item.last_used, item.detail
    )


def _path_key(item: Item) -> str:
    """``str(item.path)``, without building a Path: a scan's locations are already in
    that form, but under a data folder ``.`` (``./cache/...``)."""
    location = item.location
    return str(item.path) if location.startswith("./") else location


def _frameworks(ws: Workspace, tree: Tree) -> tuple[FrameworkCache, ...]:
    """The enabled framework caches and those on disk, measured from the scan's walk."""
    settings = ws.reading_settings().cache
    return tuple(scan_framework_caches(ws.cache_dir, settings, tree.usage))


def _size(path: Path, tree: Tree) -> int:
    try:
        return path.stat().st_size if path.is_file() else tree.usage(path).size
    except OSError:
        return 0
