"""Carry out a :class:`~accel.clean._plan.CleanPlan`, re-checking each item just before.

Rules: markers (``meta.json``, ``manifest.json``, ``run.json``) go before data, so a
half-removed item is never visible as valid; what is already gone is fine; a symlink is
removed itself, never its target; nothing on another filesystem is entered; a series is
held (its lease) while its checkpoints go, a run's lock while its folder goes.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from accel.clean import _live
from accel.clean._plan import CleanPlan, PlanItem
from accel.clean._scan import META, Item, _read_json
from accel.fsutil import fsync_dir
from accel.locking import locked
from accel.runs import is_live
from accel.workspace import Workspace


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


@dataclass(frozen=True)
class CleanResult:
    removed: tuple[PlanItem, ...]
    skipped: tuple[Skipped, ...]
    freed_bytes: int


def execute(ws: Workspace, plan: CleanPlan) -> CleanResult:
    """Remove what ``plan`` lists; one clean at a time per workspace."""
    removed: list[PlanItem] = []
    skipped: list[Skipped] = []
    freed = 0
    root = os.path.realpath(plan.scan.root)
    with locked(ws.lock_path("clean"), ws):
        device = os.lstat(root).st_dev
        for planned in plan.items:
            why = _remove(ws, planned.item, root, device)
            if why is None:
                removed.append(planned)
                freed += planned.item.size
            else:
                skipped.append(Skipped(planned.item.path, why))
        _drop_empty_series(ws, plan)
    return CleanResult(tuple(removed), tuple(skipped), freed)


def _remove(ws: Workspace, item: Item, root: str, device: int) -> str | None:
    """Remove ``item``; the reason it stayed, or None when it is gone."""
    if not _inside(item.path, root):
        return "outside the workspace"
    if _elsewhere(item.path, device):
        return "on another filesystem"
    if item.run_id is not None and is_live(ws, item.run_id):
        return "live run"
    with _guard(ws, item) as free:
        if not free:
            return "in use"
        if item.kind == "entry" and _changed_since(item):
            return "used since the plan"
        try:
            detached = _detach(ws, item)
        except OSError as exc:
            return f"could not remove: {exc.strerror or exc}"
    if detached is None:
        return "already gone"
    # The data goes outside the lock: it was moved out of everyone's way first.
    left = remove_tree(detached, device)
    return None if not left else f"kept {left} path(s) on another filesystem"


@contextlib.contextmanager
def _guard(ws: Workspace, item: Item) -> Iterator[bool]:
    """Hold what writers of ``item`` hold: the cache lock, the series lease, the run lock."""
    if item.series is not None:
        with _live.try_hold(ws.lock_path(f"series-{item.series}"), create=True) as free:
            yield free
    elif item.kind == "run" and item.run_id is not None:
        with _live.try_hold(ws.lock_path(f"run-{item.run_id}"), create=False) as free:
            yield free
    elif item.category == "cache" and _under(item.path, ws.cache_dir):
        with locked(ws.lock_path("cache"), ws):
            yield True
    else:
        yield True


def _changed_since(item: Item) -> bool:
    try:
        meta = _read_json(str(item.path / META))
        return float(meta.get("last_used") or meta["created"]) != item.last_used
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True


def _detach(ws: Workspace, item: Item) -> Path | None:
    """Remove the marker, then move the item into ``tmp/`` (where it is plain debris).

    Moving it makes the rest of the removal safe to do without the lock: a writer that
    recreates the same name gets a fresh folder we never touch.
    """
    if item.marker is not None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(item.path / item.marker)
            fsync_dir(item.path)
    trash = ws.tmp_dir / f"clean-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        ws.tmp_dir.mkdir(parents=True, exist_ok=True)
        os.rename(item.path, trash)
    except FileNotFoundError:
        return None
    except OSError:
        return item.path  # e.g. another filesystem: removed where it is
    return trash


def remove_tree(path: Path, device: int) -> int:
    """Remove ``path`` without following links or entering other filesystems.

    Returns how many paths had to stay (mount points and what holds them).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        _unlink(path)
        return 0
    if st.st_dev != device:
        return 1
    left = 0
    try:
        with os.scandir(path) as it:
            children = list(it)
    except FileNotFoundError:
        return 0
    for child in children:
        left += remove_tree(Path(child.path), device)
    if left == 0:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
    return left


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _elsewhere(path: Path, device: int) -> bool:
    try:
        return os.lstat(path).st_dev != device
    except OSError:
        return False  # gone: nothing of it can be elsewhere


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _inside(path: Path, root: str) -> bool:
    # The item itself may be a link (removed as such); its folder must resolve inside.
    parent = os.path.realpath(path.parent)
    return parent == root or parent.startswith(root + os.sep)


def _drop_empty_series(ws: Workspace, plan: CleanPlan) -> None:
    series = {p.item.series for p in plan.items if p.item.series is not None}
    for name in sorted(series):
        with _live.try_hold(ws.lock_path(f"series-{name}"), create=True) as free:
            if free:
                with contextlib.suppress(OSError):
                    os.rmdir(ws.checkpoints_dir / name)
