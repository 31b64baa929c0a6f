"""Scan the workspace into frozen records of raw numbers: what ``clean`` may act on.

Reading only. Every item is classified by the one reader of its format: a checkpoint is
what :mod:`accel.store.series` accepts, a cache entry what :mod:`accel.store.entry`
accepts, a run what :func:`accel.runs.read_record` proves, a rotated log what
:mod:`accel.wslog` wrote. Leftovers of accel's own interrupted writes and deletions
carry its marker (``debris``). Anything else is ``unknown`` (and a checkpoint or entry
whose record is refused, ``unreadable``): reported, never deleted.

Ages come from the times accel recorded (``meta.json``, ``manifest.json``, ``run.json``);
file mtimes are the fallback for what has no record. Nothing here follows a symlink: a
link is an unknown item of its own size, never a way out of the workspace. A workspace
that is not accel's is refused (``WorkspaceError``) before anything is read.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from accel import layout
from accel.clean import _live
from accel.errors import IntegrityError
from accel.frameworks import FRAMEWORKS as _FRAMEWORK_NAMES
from accel.layout import CACHE_META, ENTRY_SUFFIX, MANIFEST, RUN_RECORD, is_atomic_temp
from accel.runs import live_run_ids, read_record, records_this_run
from accel.store import series as series_mod
from accel.store.entry import MetaMissing, parse_cache_meta
from accel.workspace import Workspace
from accel.wslog import is_crash_log, is_log_file

CATEGORIES = ("cache", "checkpoints", "frameworks", "logs", "runs")
FRAMEWORKS = "frameworks"  # cache/frameworks/<name>/: torch.compile's caches (accel.frameworks)
META = CACHE_META
UNKNOWN = "unknown"  # not made by accel: left alone
UNREADABLE = "unreadable"  # accel's name, but its record is refused: left alone
LEFT_ALONE = frozenset({UNKNOWN, UNREADABLE})
_MAX_THREADS = 8
_PARALLEL_FROM = 2000
# On 2 cores the reader threads fight over the GIL: a serial scan of 20,000 entries
# took 0.26-0.33 s against 0.38-0.54 s on threads. Only larger machines use them.
_PARALLEL_MIN_CPUS = 4


class Item(NamedTuple):
    """One thing found. ``kind`` is entry, checkpoint, framework, run, log, debris (all
    removable) or unknown, unreadable (never removed); ``last_used`` is a unix time;
    ``marker`` the file that proves accel made it; ``detail`` why it is left alone.

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

    @property
    def path(self) -> Path:
        return Path(self.location)


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
        return tuple(i for i in self.items if i.kind in LEFT_ALONE)


@dataclass
class _Acc:
    root: str = ""
    items: list[Item] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    other: int = 0

    def unknown(self, category: str, path: str, detail: str | None = None) -> None:
        size, mtime = _walk(path)
        kind = UNKNOWN if detail is None else UNREADABLE
        name = os.path.relpath(path, self.root)
        self.items.append(Item(category, kind, path, size, mtime, name=name, detail=detail))

    def leftover(self, category: str, entry: os.DirEntry[str], **facts: Any) -> None:
        """Debris when accel's marker proves it (or it is an empty folder), else unknown."""
        if _provably_debris(entry):
            self.items.append(_debris(category, entry, **facts))
        else:
            self.unknown(category, entry.path)


def scan(ws: Workspace, now: float) -> WorkspaceScan:
    """Scan ``ws`` (its data folder) as of ``now``; WorkspaceError for a folder accel did
    not make. A workspace not created yet scans empty."""
    root = ws.data_path
    acc = _Acc(root=str(root))
    if ws.identify():
        lay = ws.layout
        _scan_data_root(lay, acc)
        _scan_cache(lay, acc)
        _scan_checkpoints(lay.checkpoints_dir, acc)
        _scan_runs(lay.runs_dir, acc)
        _scan_logs(lay.logs_dir, acc)
        _scan_tmp(lay.tmp_dir, acc)
        acc.other += _walk(lay.root / layout.CONFIG_DIR)[0]
    return WorkspaceScan(
        root=root,
        now=now,
        items=tuple(acc.items),
        other_size=acc.other,
        live_runs=frozenset(live_run_ids(ws.layout)),
        held_series=_live.held_series(ws.locks_dir),
        warnings=tuple(acc.warnings),
    )


def _scan_data_root(lay: layout.Layout, acc: _Acc) -> None:
    root_files = {layout.LAYOUT_FILE, layout.LOCKS_DIR, layout.GITIGNORE}
    own = {layout.DATA_MARKER} if lay.relocated else root_files
    for entry in _children(lay.data):
        name = entry.name
        if name in layout.DATA_NAMES - {layout.STATE_FILE} or name == layout.CONFIG_DIR:
            continue  # scanned below (config: counted once, from the root)
        if name == layout.STATE_FILE or name in own:
            acc.other += _walk(entry.path)[0]
        elif is_atomic_temp(name) and not entry.is_dir(follow_symlinks=False):
            acc.items.append(_debris("cache", entry))
        else:
            acc.unknown("workspace", entry.path)


# -- cache --------------------------------------------------------------------------------


def _scan_cache(lay: layout.Layout, acc: _Acc) -> None:
    for entry in _children(lay.cache_dir):
        if entry.name == layout.ENTRIES_DIR and entry.is_dir(follow_symlinks=False):
            _scan_entries(entry.path, acc)
        elif entry.name == layout.FRAMEWORKS_DIR and entry.is_dir(follow_symlinks=False):
            _scan_frameworks(entry.path, acc)
        elif is_atomic_temp(entry.name):
            acc.items.append(_debris("cache", entry))
        else:
            acc.unknown("cache", entry.path)


def _scan_entries(folder: str, acc: _Acc) -> None:
    # Keys with slashes live in namespace folders: cache/entries/<ns>/<name>.entry/
    found: list[tuple[os.DirEntry[str], str]] = []
    stack = [(folder, "")]
    while stack:
        path, prefix = stack.pop()
        for entry in _children(path):
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
    for part in _in_parallel(_cache_entries, found, acc.root):
        acc.items += part.items
        acc.warnings += part.warnings
        acc.other += part.other


def _cache_entries(entries: list[tuple[os.DirEntry[str], str]], root: str) -> _Acc:
    acc = _Acc(root=root)
    for entry, key in entries:
        _cache_entry(entry, key, acc)
    return acc


def _in_parallel(
    work: Callable[[list[Any], str], _Acc], entries: list[Any], root: str
) -> list[_Acc]:
    """``work`` over contiguous chunks, on threads when there are many entries.

    Reading 100,000 small meta.json files is system calls, which release the GIL.
    """
    workers = min(_MAX_THREADS, os.cpu_count() or 1)
    if workers < _PARALLEL_MIN_CPUS or len(entries) < _PARALLEL_FROM:
        return [work(entries, root)]
    from concurrent.futures import ThreadPoolExecutor

    size = -(-len(entries) // (workers * 4))
    chunks = [entries[i : i + size] for i in range(0, len(entries), size)]
    with ThreadPoolExecutor(workers, thread_name_prefix="accel-scan") as pool:
        return list(pool.map(work, chunks, [root] * len(chunks)))


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
        )
    )


def _scan_frameworks(folder: str, acc: _Acc) -> None:
    """One item per framework cache accel set up; its age is its newest file."""
    for entry in _children(folder):
        name = entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and name in _FRAMEWORK_NAMES:
            size, newest = _walk(entry.path)
            acc.items.append(Item(FRAMEWORKS, "framework", entry.path, size, newest, name=name))
        elif _in_flight(name, is_dir):
            acc.leftover(FRAMEWORKS, entry)
        else:
            acc.unknown(FRAMEWORKS, entry.path)


# -- checkpoints --------------------------------------------------------------------------


def _scan_checkpoints(folder: Path, acc: _Acc) -> None:
    for entry in _children(folder):
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and layout.SERIES_RE.fullmatch(entry.name):
            _series(entry.name, series_mod.view(Path(entry.path)), acc)
        elif _in_flight(entry.name, is_dir):
            acc.leftover("checkpoints", entry)
        else:
            acc.unknown("checkpoints", entry.path)


def _series(name: str, view: series_mod.SeriesView, acc: _Acc) -> None:
    acc.items += [checkpoint_item(name, found) for found in view.checkpoints]
    for path in view.debris:
        size, mtime = _walk(path)
        acc.items.append(
            Item("checkpoints", "debris", str(path), size, mtime, name=path.name, series=name)
        )
    for bad in view.unreadable:
        acc.warnings.append(f"skipped {bad.path}: {bad.reason}")
        acc.unknown("checkpoints", str(bad.path), bad.reason)
    for path in view.unknown:
        acc.unknown("checkpoints", str(path))


def checkpoint_item(series: str, found: series_mod.Found) -> Item:
    """The item a committed checkpoint of ``series`` is (also for ``accel checkpoints rm``):
    its age is its recorded creation, which execution checks again (a re-save is kept)."""
    m = found.manifest
    return Item(
        "checkpoints",
        "checkpoint",
        str(found.path),
        _walk(found.path)[0],
        m.created,
        marker=MANIFEST,
        name=f"{series}/{series_mod.step_dir_name(m.step)}",
        series=series,
        step=m.step,
        run_id=m.run_id,
    )


# -- runs and logs ------------------------------------------------------------------------


def _scan_runs(folder: Path, acc: _Acc) -> None:
    for entry in _children(folder):
        is_dir = entry.is_dir(follow_symlinks=False)
        record = read_record(Path(entry.path)) if is_dir else None
        if records_this_run(record, Path(entry.path)):
            acc.items.append(_run(entry, record or {}))
        elif _in_flight(entry.name, is_dir) or (is_dir and layout.is_empty_dir(Path(entry.path))):
            acc.leftover("runs", entry)
        else:
            acc.unknown("runs", entry.path)


def _run(entry: os.DirEntry[str], record: dict[str, Any]) -> Item:
    size, newest = _walk(entry.path)
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
    for entry in _children(folder):
        name, path = entry.name, Path(entry.path)
        if name in (layout.RUNS_DIR, layout.TRAINING_LOG):
            if name == layout.TRAINING_LOG:
                acc.other += _walk(entry.path)[0]
            continue
        if entry.is_dir(follow_symlinks=False) or entry.is_symlink():
            acc.unknown("logs", entry.path)
        elif is_atomic_temp(name):
            acc.items.append(_debris("logs", entry))
        elif _accel_log(name, path):
            st = entry.stat(follow_symlinks=False)
            acc.items.append(Item("logs", "log", entry.path, st.st_size, st.st_mtime, name=name))
        else:
            acc.unknown("logs", entry.path)


def _accel_log(name: str, path: Path) -> bool:
    if layout.ROTATED_LOG_RE.fullmatch(name):
        return is_log_file(path)
    return layout.CRASH_LOG_RE.fullmatch(name) is not None and is_crash_log(path)


def _scan_tmp(folder: Path, acc: _Acc) -> None:
    """Staging: what carries accel's marker (any name) or is an atomic-write temp file."""
    for entry in _children(folder):
        if _provably_debris(entry):
            acc.items.append(_debris("cache", entry))
        else:
            acc.unknown("cache", entry.path)


# -- helpers ------------------------------------------------------------------------------


def _in_flight(name: str, is_dir: bool) -> bool:
    """A name accel gives what it is writing or deleting (the marker must still prove it)."""
    if not is_dir:
        return is_atomic_temp(name)
    return bool(layout.DELETED_RE.fullmatch(name) or layout.SYNC_STAGE_RE.fullmatch(name))


def _provably_debris(entry: os.DirEntry[str]) -> bool:
    """A folder carrying accel's marker (or holding nothing), or an atomic-write temp."""
    if not entry.is_dir(follow_symlinks=False):
        return not entry.is_symlink() and is_atomic_temp(entry.name)
    path = Path(entry.path)
    return layout.is_owned(path) or layout.is_empty_dir(path)


def _debris(
    category: str,
    entry: os.DirEntry[str],
    *,
    series: str | None = None,
    name: str | None = None,
) -> Item:
    size, mtime = _walk(entry.path)
    return Item(category, "debris", entry.path, size, mtime, name=name or entry.name, series=series)


def proves_debris(path: Path) -> bool:
    """Re-check, just before removal, that ``path`` is still accel's debris."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return layout.is_owned(path) or layout.is_empty_dir(path)
    return stat.S_ISREG(st.st_mode) and is_atomic_temp(path.name)


def proves_item(item: Item) -> bool:
    """Re-check, just before removal, what proved ``item`` accel's when it was scanned
    (checkpoints and entries are re-checked by their own protocols)."""
    path = item.path
    if item.kind == "debris":
        return proves_debris(path)
    if item.kind == "run":
        return not os.path.islink(path) and records_this_run(read_record(path), path)
    if item.kind == "log":
        return not os.path.islink(path) and _accel_log(path.name, path)
    if item.kind == "framework":
        return path.name in _FRAMEWORK_NAMES and not os.path.islink(path) and path.is_dir()
    return item.kind in ("entry", "checkpoint")


def _children(folder: str | Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _walk(path: str | Path) -> tuple[int, float]:
    """(bytes, newest mtime) of ``path`` and what is under it; links are not followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0, 0.0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, st.st_mtime
    total, newest, stack = 0, st.st_mtime, [str(path)]
    while stack:
        for entry in _children(stack.pop()):
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            newest = max(newest, est.st_mtime)
            if stat.S_ISDIR(est.st_mode):
                if est.st_dev == st.st_dev:  # never measure across a mount
                    stack.append(entry.path)
            else:
                total += est.st_size
    return total, newest


_RAW_DECODE = json.JSONDecoder().raw_decode
_CHUNK = 16384


def _read_json(path: str) -> Any:
    # The hot path of a 100,000-entry scan: raw descriptors, no text layer, and small
    # reads (os.read(fd, 1 MiB) allocates, and maps, the whole buffer every time).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        data = os.read(fd, _CHUNK)
        while len(data) % _CHUNK == 0 and data:
            more = os.read(fd, _CHUNK)
            if not more:
                break
            data += more
    finally:
        os.close(fd)
    text = data.decode("utf-8")
    try:
        value, end = _RAW_DECODE(text)
    except ValueError:
        return json.loads(text)  # leading whitespace, or the error message for the warning
    if text[end:].strip():
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _time(value: Any) -> float:
    """A recorded time: unix seconds or an ISO 8601 string (run.json); 0 when unknown."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        from datetime import datetime, timezone

        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return 0.0
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
    return 0.0
