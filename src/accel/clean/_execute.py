"""Carry out a :class:`~accel.clean._plan.CleanPlan`, re-checking each item just before.

Rules: only items accel can prove it made go, and the proof is checked again at the
moment of removal (under the lock their writers use: the cache lock for entries, the
series lease for checkpoints, the run lock for runs). A folder is first renamed to a
``.del-*`` sibling, durably, then removed with its proof files last, so an interrupted
clean leaves nothing that looks valid and nothing that the next clean cannot prove is
accel's. A symlink is removed itself, never its target; nothing on another filesystem is
entered; what is already gone is fine. Unknown and unreadable items are never touched.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel import _faults, layout
from accel._locks import locked, try_hold
from accel.clean._foreign import kept_reason, strip
from accel.clean._items import META, Item
from accel.clean._plan import CleanPlan, PlanItem
from accel.clean._proof import ELSEWHERE, Bounds, proves_item
from accel.clean._walk import read_json as _read_json
from accel.errors import WorkspaceError
from accel.layout import CACHE_LOCK, CLEAN_LOCK
from accel.runs import is_live
from accel.store import series as series_mod
from accel.workspace import Workspace

__all__ = ["CleanResult", "Skipped", "execute"]


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


@dataclass(frozen=True)
class CleanResult:
    removed: tuple[PlanItem, ...]
    skipped: tuple[Skipped, ...]
    freed_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "freed_bytes": self.freed_bytes,
            "removed": [str(p.item.path) for p in self.removed],
            "skipped": [{"path": str(s.path), "reason": s.reason} for s in self.skipped],
        }


def execute(ws: Workspace, plan: CleanPlan) -> CleanResult:
    """Remove what ``plan`` lists; one clean at a time per workspace."""
    if not ws.identify():
        raise WorkspaceError(f"{ws.path} is not an accel workspace; nothing was removed")
    removed: list[PlanItem] = []
    skipped: list[Skipped] = []
    freed = 0
    with locked(ws.lock_path(CLEAN_LOCK), ws.lock_timeout):
        bounds = Bounds.of(plan.scan.root)
        for planned in plan.items:
            why = _remove(ws, planned.item, bounds, plan.policy.force)
            if why is None:
                removed.append(planned)
                freed += planned.item.size
            else:
                skipped.append(Skipped(planned.item.path, why))
        _drop_empty_series(ws, plan)
        _drop_orphan_run_locks(ws)
    return CleanResult(tuple(removed), tuple(skipped), freed)


def _remove(ws: Workspace, item: Item, bounds: Bounds, force: bool) -> str | None:
    """Remove ``item``; the reason it stayed, or None when it is gone."""
    if item.kind in ("unknown", "unreadable"):
        return "not made by accel"
    # The item itself may be a link (removed as such): its folder must be in bounds.
    out = bounds.problem(item.path.parent)
    if out is not None:
        return out
    if _elsewhere(item.path, bounds.device):  # a mount point in its place: seen only here
        return ELSEWHERE
    if item.run_id is not None and is_live(ws.layout, item.run_id):
        return "live run"
    with _guard(ws, item) as free:
        if not free:
            return "in use"
        if item.kind == "checkpoint":
            return _retire_checkpoint(item, force)
        if not os.path.lexists(item.path):
            return "already gone"
        if not proves_item(item):
            return "no longer provably accel's"
        if item.kind == "entry" and _changed_since(item):
            return "used since the plan"
        kept = [] if force else strip(ws.cache.root, item)
        if kept:
            return kept_reason(kept)
        try:
            detached = _detach(item.path)
        except OSError as exc:
            return f"could not remove: {exc.strerror or exc}"
        if item.kind == "run" and item.run_id is not None:
            # Its lock goes with it, held here (no launcher takes a run id twice):
            # locks/ kept one file per run ever made, each probed by every command.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(layout.run_lock(ws.path, item.run_id))
    if detached is None:
        return None
    _faults.point("clean.detached")
    # The data goes outside the lock: it was moved out of everyone's way first.
    left = layout.dispose(detached, bounds.device)
    return None if not left else f"kept {left} path(s) on another filesystem"


@contextlib.contextmanager
def _guard(ws: Workspace, item: Item) -> Iterator[bool]:
    """Hold what writers of ``item`` hold: the cache lock, the series lease, the run lock."""
    if item.series is not None:
        with try_hold(layout.series_lock(ws.path, item.series), create=True) as free:
            yield free
    elif item.kind == "run" and item.run_id is not None:
        with try_hold(layout.run_lock(ws.path, item.run_id), create=False) as free:
            yield free
    elif item.category == "cache" and _under(item.path, ws.cache_dir):
        with locked(ws.lock_path(CACHE_LOCK), ws.lock_timeout):
            yield True
    else:
        yield True


def _retire_checkpoint(item: Item, force: bool) -> str | None:
    """Under the series lease: finish an interrupted re-save, then retire the step if it
    is still the checkpoint that was planned (a re-save since then keeps it)."""
    folder = item.path.parent
    reaper = series_mod.Reaper(background=False)
    try:
        series_mod.recover(folder, reaper)
    except OSError as exc:
        return f"could not finish an interrupted save: {exc.strerror or exc}"
    assert item.step is not None
    found = series_mod.view(folder).step(item.step)
    if found is None:
        return "already gone"
    if found.manifest.created != item.last_used:
        return "saved again since the plan"
    _faults.point("clean.retiring")
    try:
        kept = series_mod.retire_checkpoint(found, reaper, force=force)
    except OSError as exc:
        return f"could not remove: {exc.strerror or exc}"
    return "already gone" if kept is None else kept_reason(kept) if kept else None


def _changed_since(item: Item) -> bool:
    try:
        meta = _read_json(str(item.path / META))
        return float(meta.get("last_used") or meta["created"]) != item.last_used
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True


def _detach(path: Path) -> Path | None:
    """Files and links go at once (an unlink is atomic); folders are renamed aside first.

    Returns the folder to dispose of, or None when nothing is left to do.
    """
    if os.path.islink(path) or not os.path.isdir(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return None
    try:
        return layout.detach(path)
    except FileNotFoundError:
        return None


def _elsewhere(path: Path, device: int) -> bool:
    try:
        return os.lstat(path).st_dev != device
    except OSError:
        return False  # gone: nothing of it can be elsewhere


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _drop_empty_series(ws: Workspace, plan: CleanPlan) -> None:
    series = {p.item.series for p in plan.items if p.item.series is not None}
    for name in sorted(series):
        with try_hold(layout.series_lock(ws.path, name), create=True) as free:
            if free:
                with contextlib.suppress(OSError):
                    os.rmdir(ws.checkpoints_dir / name)


ORPHAN_LOCK_AGE_S = 86400.0


def _drop_orphan_run_locks(ws: Workspace) -> None:
    """The run locks of runs whose folder is gone, left by accels before a removed run
    took its lock along: each was probed by every command asking which runs are live.

    One goes only when it is a plain file made over a day ago (a launcher that is still
    between creating its lock and taking it is not: nobody removes a new one) and held by
    nobody: it is unlinked while held here, as a removed run's own (no launcher takes a
    run id twice). A missing lock and a free one say the same, "not live", to every
    reader.
    """
    import time

    prefix, suffix = layout.RUN_LOCK_PREFIX, layout.LOCK_SUFFIX
    old = time.time() - ORPHAN_LOCK_AGE_S
    try:
        with os.scandir(ws.layout.locks_dir) as it:
            names = [e.name for e in it if e.name.startswith(prefix) and e.name.endswith(suffix)]
    except OSError:
        return
    for name in names:
        run_id = name[len(prefix) : -len(suffix)]
        if not run_id or os.path.lexists(ws.runs_dir / run_id):
            continue
        path = layout.run_lock(ws.path, run_id)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_mtime > old:
            continue
        with try_hold(path, create=False) as free, contextlib.suppress(OSError):
            if free:
                os.unlink(path)
