"""What the workspace holds, measured: the data behind ``accel status``.

Reads only, never imports torch. Sizes are raw bytes; formatting is the CLI's job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from accel._fs import tree_size
from accel.errors import AccelError
from accel.frameworks import FrameworkCache, scan_framework_caches
from accel.layout import CACHE_DIR, CHECKPOINTS_DIR, CONFIG_DIR, LOGS_DIR, RUNS_DIR, STATE_FILE
from accel.workspace import Workspace

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

    @property
    def total_size(self) -> int:
        return sum(p.size for p in self.parts)


def collect(ws: Workspace, *, details: bool = True, now: float | None = None) -> WorkspaceStatus:
    """Measure ``ws``; ``details`` adds live runs, the largest and oldest items, and what
    is left alone. A folder accel did not make, or whose ``layout.json`` this accel
    refuses (damaged, a version none writes, a newer one), is reported, not measured."""
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
    parts = _parts(ws.path, ws.data_path)
    status = WorkspaceStatus(
        ws.path, ws.exists, layout, ws.config_file, config_error, parts, now=now
    )
    if not details or not ws.exists:
        return status
    return _with_details(ws, status)


def _refused(ws: Workspace, why: str, now: float) -> WorkspaceStatus:
    return WorkspaceStatus(
        ws.path, ws.exists, None, ws.config_file, None, (), now=now, workspace_error=why
    )


def _parts(path: Path, base: Path) -> tuple[PartSize, ...]:
    runs = base / LOGS_DIR / RUNS_DIR
    runs_size = _size(runs)
    named = (
        ("config", path / CONFIG_DIR, None),
        ("cache", base / CACHE_DIR, None),
        ("checkpoints", base / CHECKPOINTS_DIR, None),
        ("logs", base / LOGS_DIR, runs_size),
        ("runs", runs, None),
        ("state", base / STATE_FILE, None),
    )
    return tuple(PartSize(n, p, _size(p) - (minus or 0)) for n, p, minus in named)


def _with_details(ws: Workspace, status: WorkspaceStatus) -> WorkspaceStatus:
    from accel.clean import LEFT_ALONE, scan

    found = scan(ws, status.now)
    items = [
        StatusItem(i.category, i.kind, i.name, i.path, i.size, i.last_used, i.detail)
        for i in found.items
    ]
    ours = [i for i in items if i.kind not in LEFT_ALONE]
    largest = sorted(ours, key=lambda i: (-i.size, str(i.path)))[:TOP]
    oldest = sorted(ours, key=lambda i: (i.last_used, str(i.path)))[:TOP]
    return replace(
        status,
        live_runs=tuple(sorted(found.live_runs)),
        largest=tuple(largest),
        oldest=tuple(oldest),
        frameworks=tuple(scan_framework_caches(ws.cache_dir, ws.reading_settings().cache)),
        left_alone=tuple(sorted((i for i in items if i.kind in LEFT_ALONE), key=_by_path)),
    )


def _by_path(item: StatusItem) -> str:
    return str(item.path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else tree_size(path)
    except OSError:
        return 0
