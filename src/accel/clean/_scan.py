"""Scan the workspace into frozen records of raw numbers: what ``clean`` may act on.

Reading only. Every item is classified by the one reader of its format: a checkpoint is
what :mod:`accel.store.series` accepts, a cache entry what :mod:`accel.store.entry`
accepts, a run what :func:`accel.runs.read_record` proves, a rotated log what
:mod:`accel.training_log` wrote. Leftovers of accel's own interrupted writes and deletions
carry its marker (``debris``). Anything else is ``unknown`` (and a checkpoint or entry
whose record is refused, ``unreadable``): reported, never deleted.

Ages come from the times accel recorded (``meta.json``, ``manifest.json``, ``run.json``);
file mtimes are the fallback for what has no record. Nothing here follows a symlink: a
link is an unknown item of its own size, never a way out of the workspace. A workspace
that is not accel's is refused (``WorkspaceError``) before anything is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel import layout
from accel.clean import _live
from accel.clean._items import (
    FRAMEWORKS,
    META,
    UNKNOWN,
    UNREADABLE,
    Item,
    WorkspaceScan,
)
from accel.clean._proof import Bounds
from accel.clean._proof import accel_log as _accel_log
from accel.clean._proof import in_flight as _in_flight
from accel.clean._proof import provably_debris as _provably_debris
from accel.clean._walk import Tree
from accel.clean._walk import read_json as _read_json
from accel.clean._walk import walk as _walk
from accel.errors import IntegrityError, MetaMissing, unreadable
from accel.frameworks import FRAMEWORKS as _FRAMEWORK_NAMES
from accel.layout import ENTRY_SUFFIX, MANIFEST, RUN_RECORD, is_atomic_temp
from accel.runs import live_run_ids, read_record, records_this_run
from accel.store import series as series_mod
from accel.store.entry import parse_cache_meta
from accel.store.kv import read_state
from accel.units import recorded_time as _time
from accel.workspace import Workspace

__all__ = ["checkpoint_item", "scan"]

_MAX_THREADS = 8
_PARALLEL_FROM = 2000
# On 2 cores the reader threads fight over the GIL: a serial scan of 20,000 entries
# took 0.26-0.33 s against 0.38-0.54 s on threads. Only larger machines use them.
_PARALLEL_MIN_CPUS = 4


@dataclass
class _Acc:
    root: str = ""
    tree: Tree = field(default_factory=Tree)
    items: list[Item] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    other: int = 0

    def unknown(self, category: str, path: str, detail: str | None = None) -> None:
        size, mtime = self.tree.walk(path)
        kind = UNKNOWN if detail is None else UNREADABLE
        name = os.path.relpath(path, self.root)
        self.items.append(Item(category, kind, path, size, mtime, name=name, detail=detail))

    def leftover(self, category: str, entry: os.DirEntry[str], name: str | None = None) -> None:
        """Debris when accel's marker proves it (or it is an empty folder), else unknown."""
        if _provably_debris(entry):
            self.debris(category, entry, name)
        else:
            self.unknown(category, entry.path)

    def debris(self, category: str, entry: os.DirEntry[str], name: str | None = None) -> None:
        size, mtime = self.tree.walk(entry.path)
        name = name or entry.name
        self.items.append(Item(category, "debris", entry.path, size, mtime, name=name))


def scan(ws: Workspace, now: float, *, tree: Tree | None = None) -> WorkspaceScan:
    """Scan ``ws`` (its data folder) as of ``now``; WorkspaceError for a folder accel did
    not make. A workspace not created yet scans empty.

    ``tree``: the reading of the folders to share with the caller (``accel status`` and
    ``accel env`` measure the parts from what the scan listed, instead of listing it again)."""
    root = ws.data_path
    acc = _Acc(root=str(root), tree=Tree() if tree is None else tree)
    if ws.identify():
        bounds = Bounds.of(root)  # first: a link to a folder that is gone reads nothing
        lay = ws.layout
        _scan_data_root(lay, acc)
        _scan_cache(lay, acc)
        _scan_checkpoints(lay.checkpoints_dir, acc)
        _scan_runs(lay.runs_dir, acc)
        _scan_logs(lay.logs_dir, acc)
        _scan_tmp(lay.tmp_dir, acc)
        _scan_kept(lay.root / layout.CONFIG_DIR, acc)
        acc.items = _in_bounds(acc.items, bounds)
    return WorkspaceScan(
        root=root,
        now=now,
        items=tuple(acc.items),
        other_size=acc.other,
        live_runs=frozenset(live_run_ids(ws.layout)),
        held_series=_live.held_series(ws.locks_dir),
        warnings=tuple(acc.warnings),
    )


def _in_bounds(items: list[Item], bounds: Bounds) -> list[Item]:
    """``items``, those in a folder that leads out of the workspace (a linked
    ``checkpoints/``) or onto another filesystem left alone, saying why: the folder's
    verdict is the one execution would give each of them."""
    verdicts: dict[str, str | None] = {}
    kept = []
    for item in items:
        folder = os.path.dirname(item.location)
        if folder not in verdicts:
            verdicts[folder] = bounds.problem(folder)
        why = verdicts[folder]
        kept.append(item if why is None or item.left_alone else item._replace(detail=why))
    return kept


def _scan_data_root(lay: layout.Layout, acc: _Acc) -> None:
    root_files = {layout.LAYOUT_FILE, layout.LOCKS_DIR, layout.GITIGNORE}
    own = {layout.DATA_MARKER} if lay.relocated else root_files
    for entry in acc.tree.children(lay.data):
        name = entry.name
        if name in layout.DATA_NAMES - {layout.STATE_FILE} or name == layout.CONFIG_DIR:
            continue  # scanned below (config: counted once, from the root)
        if name == layout.STATE_FILE and (problem := _state_problem(Path(entry.path))):
            acc.warnings.append(f"skipped {entry.path}: {problem}")
            acc.unknown("workspace", entry.path, problem)
        elif name == layout.LOCKS_DIR and name in own:
            _scan_kept(Path(entry.path), acc)
        elif name == layout.STATE_FILE or name in own:
            acc.other += acc.tree.walk(entry.path)[0]
        elif is_atomic_temp(name) and not entry.is_dir(follow_symlinks=False):
            acc.debris("cache", entry)
        else:
            acc.unknown("workspace", entry.path)


def _scan_kept(folder: Path, acc: _Acc) -> None:
    """``config/`` and ``locks/``, kept whole but for an interrupted write's temp file (a
    ``config set`` or a run's lease record killed mid-write), which is debris; nothing in
    a linked folder (a dotfile manager's config) is ever listed for removal."""
    if os.path.islink(folder):
        acc.other += acc.tree.walk(folder)[0]
        return
    for entry in acc.tree.children(folder):
        if is_atomic_temp(entry.name) and entry.is_file(follow_symlinks=False):
            acc.debris("cache", entry, name=f"{folder.name}/{entry.name}")
        else:
            acc.other += acc.tree.walk(entry.path)[0]


def _state_problem(path: Path) -> str | None:
    """Why the store cannot read ``state.bin`` (its own reader decides), or None."""
    try:
        read_state(path)
    except IntegrityError as exc:
        return str(exc)
    except OSError as exc:
        return str(unreadable(path, exc))
    return None


# -- cache --------------------------------------------------------------------------------


def _scan_cache(lay: layout.Layout, acc: _Acc) -> None:
    for entry in acc.tree.children(lay.cache_dir):
        if entry.name == layout.ENTRIES_DIR and entry.is_dir(follow_symlinks=False):
            _scan_entries(entry.path, acc)
        elif entry.name == layout.FRAMEWORKS_DIR and entry.is_dir(follow_symlinks=False):
            _scan_frameworks(entry.path, acc)
        elif is_atomic_temp(entry.name):
            acc.debris("cache", entry)
        else:
            acc.unknown("cache", entry.path)


def _scan_entries(folder: str, acc: _Acc) -> None:
    # Keys with slashes live in namespace folders: cache/entries/<ns>/<name>.entry/
    found: list[tuple[os.DirEntry[str], str]] = []
    stack = [(folder, "")]
    while stack:
        path, prefix = stack.pop()
        for entry in acc.tree.children(path):
            name = entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir and name.endswith(ENTRY_SUFFIX) and not name.startswith("."):
                found.append((entry, prefix + name[: -len(ENTRY_SUFFIX)]))
            elif is_dir and not name.startswith("."):
                stack.append((entry.path, f"{prefix}{name}/"))
            elif _in_flight(name, is_dir):
                acc.leftover("cache", entry)
            else:
                acc.unknown("cache", entry.path)
    for part in _in_parallel(_cache_entries, found, acc):
        acc.items += part.items
        acc.warnings += part.warnings
        acc.other += part.other


def _cache_entries(entries: list[tuple[os.DirEntry[str], str]], parent: _Acc) -> _Acc:
    acc = _Acc(root=parent.root, tree=parent.tree)
    for entry, key in entries:
        _cache_entry(entry, key, acc)
    return acc


def _in_parallel(
    work: Callable[[list[Any], _Acc], _Acc], entries: list[Any], parent: _Acc
) -> list[_Acc]:
    """``work`` over contiguous chunks, on threads when there are many entries.

    Reading 100,000 small meta.json files is system calls, which release the GIL.
    """
    workers = min(_MAX_THREADS, os.cpu_count() or 1)
    if workers < _PARALLEL_MIN_CPUS or len(entries) < _PARALLEL_FROM:
        return [work(entries, parent)]
    from concurrent.futures import ThreadPoolExecutor

    size = -(-len(entries) // (workers * 4))
    chunks = [entries[i : i + size] for i in range(0, len(entries), size)]
    with ThreadPoolExecutor(workers, thread_name_prefix="accel-scan") as pool:
        return list(pool.map(work, chunks, [parent] * len(chunks)))


def _cache_entry(entry: os.DirEntry[str], key: str, acc: _Acc) -> None:
    meta_path = entry.path + os.sep + META
    try:
        meta = parse_cache_meta(_read_json(meta_path), meta_path, key)
    except (FileNotFoundError, MetaMissing):  # a put or a delete was interrupted
        acc.leftover("cache", entry, name=key)
        return
    except (OSError, ValueError, IntegrityError) as exc:
        acc.warnings.append(f"skipped {entry.path}: unreadable {META} ({exc})")
        acc.unknown("cache", entry.path, f"unreadable {META}: {exc}")
        return
    # Positional: keywords cost a third more, and this runs once per entry.
    acc.items.append(
        Item(
            "cache",
            "entry",
            entry.path,
            meta.size,
            meta.last_used,
            META,
            key,
            None,
            None,
            meta.run_id,
            None,
            None,
            (),
            meta.payload,
        )
    )


def _scan_frameworks(folder: str, acc: _Acc) -> None:
    """One item per framework cache accel set up; its age is its newest file."""
    for entry in acc.tree.children(folder):
        name = entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and name in _FRAMEWORK_NAMES:
            size, newest = acc.tree.walk(entry.path)
            acc.items.append(Item(FRAMEWORKS, "framework", entry.path, size, newest, name=name))
        elif _in_flight(name, is_dir):
            acc.leftover(FRAMEWORKS, entry)
        else:
            acc.unknown(FRAMEWORKS, entry.path)


# -- checkpoints --------------------------------------------------------------------------


def _scan_checkpoints(folder: Path, acc: _Acc) -> None:
    for entry in acc.tree.children(folder):
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and layout.SERIES_RE.fullmatch(entry.name):
            _series(entry.name, series_mod.view(Path(entry.path)), acc)
        elif _in_flight(entry.name, is_dir):
            acc.leftover("checkpoints", entry)
        else:
            acc.unknown("checkpoints", entry.path)


def _series(name: str, view: series_mod.SeriesView, acc: _Acc) -> None:
    acc.items += [checkpoint_item(name, found, acc.tree) for found in view.checkpoints]
    for path in view.debris:
        size, mtime = acc.tree.walk(path)
        acc.items.append(
            Item("checkpoints", "debris", str(path), size, mtime, name=path.name, series=name)
        )
    for bad in view.unreadable:
        acc.warnings.append(f"skipped {bad.path}: {bad.reason}")
        acc.unknown("checkpoints", str(bad.path), bad.reason)
    for path in view.unknown:
        acc.unknown("checkpoints", str(path))


def checkpoint_item(series: str, found: series_mod.Found, tree: Tree | None = None) -> Item:
    """The item a committed checkpoint of ``series`` is (also for ``accel checkpoints rm``):
    its age is its recorded creation, which execution checks again (a re-save is kept)."""
    m = found.manifest
    return Item(
        "checkpoints",
        "checkpoint",
        str(found.path),
        (_walk if tree is None else tree.walk)(found.path)[0],
        m.created,
        marker=MANIFEST,
        name=f"{series}/{series_mod.step_dir_name(m.step)}",
        series=series,
        step=m.step,
        run_id=m.run_id,
    )


# -- runs and logs ------------------------------------------------------------------------


def _scan_runs(folder: Path, acc: _Acc) -> None:
    for entry in acc.tree.children(folder):
        is_dir = entry.is_dir(follow_symlinks=False)
        record = read_record(Path(entry.path)) if is_dir else None
        if records_this_run(record, Path(entry.path)):
            acc.items.append(_run(entry, record or {}, acc.tree))
        elif _in_flight(entry.name, is_dir) or (is_dir and layout.is_empty_dir(Path(entry.path))):
            acc.leftover("runs", entry)
        else:
            acc.unknown("runs", entry.path)


def _run(entry: os.DirEntry[str], record: dict[str, Any], tree: Tree) -> Item:
    size, newest = tree.walk(entry.path)
    times = [newest] + [_time(record.get(k)) for k in ("started_at", "ended_at")]
    status = record.get("status")
    return Item(
        "runs",
        "run",
        entry.path,
        size,
        max(times),
        marker=RUN_RECORD,
        name=entry.name,
        run_id=entry.name,
        status=status if isinstance(status, str) else None,
    )


def _scan_logs(folder: Path, acc: _Acc) -> None:
    for entry in acc.tree.children(folder):
        name, path = entry.name, Path(entry.path)
        if name in (layout.RUNS_DIR, layout.TRAINING_LOG):
            if name == layout.TRAINING_LOG:
                acc.other += acc.tree.walk(entry.path)[0]
            continue
        if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
            acc.unknown("logs", entry.path)
        elif is_atomic_temp(name):
            acc.debris("logs", entry)
        elif _accel_log(name, path):
            st = entry.stat(follow_symlinks=False)
            acc.items.append(Item("logs", "log", entry.path, st.st_size, st.st_mtime, name=name))
        else:
            acc.unknown("logs", entry.path)


def _scan_tmp(folder: Path, acc: _Acc) -> None:
    """Staging: what carries accel's marker (any name) or is an atomic-write temp file."""
    for entry in acc.tree.children(folder):
        if _provably_debris(entry):
            acc.debris("cache", entry)
        else:
            acc.unknown("cache", entry.path)
