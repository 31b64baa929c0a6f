"""Scan the workspace into frozen records of raw numbers: what ``clean`` may act on.

Reading only. Ages come from the times accel recorded (``meta.json``, ``manifest.json``,
``run.json``); file mtimes are the fallback for what has no record. Nothing here
follows a symlink: a link is an item of its own size, never a way out of the workspace.
One unreadable entry becomes a warning, never a crash.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from accel.clean import _live
from accel.runs import live_run_ids
from accel.workspace import Workspace

CATEGORIES = ("cache", "checkpoints", "frameworks", "logs", "runs")
FRAMEWORKS = "frameworks"  # cache/frameworks/<name>/: torch.compile's caches (accel.frameworks)
ENTRY_SUFFIX = ".entry"
META = "meta.json"
MANIFEST = "manifest.json"
RUN_RECORD = "run.json"
TRAINING_LOG = "training.log"
_STEP_RE = re.compile(r"step-([0-9]+)")
_TMP_PREFIXES = (".tmp-", ".accel-tmp-")
_MAX_THREADS = 8
_PARALLEL_FROM = 2000
# On 2 cores the reader threads fight over the GIL: a serial scan of 20,000 entries
# took 0.26-0.33 s against 0.38-0.54 s on threads. Only larger machines use them.
_PARALLEL_MIN_CPUS = 4


class Item(NamedTuple):
    """One removable thing. ``marker`` is deleted first so a half-removed item is invisible.

    ``kind`` is entry, checkpoint, run, log or debris; ``last_used`` is a unix time.
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


@dataclass
class _Acc:
    items: list[Item] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    other: int = 0


def scan(ws: Workspace, now: float) -> WorkspaceScan:
    """Scan ``ws`` (its data folder) as of ``now``."""
    root = ws.data_path
    acc = _Acc()
    _scan_entries(ws.cache_dir / "entries", acc)
    acc.other += _other_cache_size(ws.cache_dir)
    _scan_frameworks(ws.cache_dir / FRAMEWORKS, acc)
    _scan_checkpoints(ws.checkpoints_dir, acc)
    _scan_runs(ws.runs_dir, acc)
    _scan_logs(ws.logs_dir, acc)
    _scan_tmp(ws.tmp_dir, acc)
    acc.other += _files_size(root) + _walk(ws.path / "config")[0]
    return WorkspaceScan(
        root=root,
        now=now,
        items=tuple(acc.items),
        other_size=acc.other,
        live_runs=frozenset(live_run_ids(ws)),
        held_series=_live.held_series(ws.locks_dir),
        warnings=tuple(acc.warnings),
    )


# -- cache --------------------------------------------------------------------------------


def _scan_entries(folder: Path, acc: _Acc) -> None:
    # Keys with slashes live in namespace folders: cache/entries/<ns>/<name>.entry/
    found: list[os.DirEntry[str]] = []
    stack = [str(folder)]
    while stack:
        for entry in _children(stack.pop()):
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir and entry.name.endswith(ENTRY_SUFFIX):
                found.append(entry)
            elif is_dir:
                stack.append(entry.path)
            elif entry.name.startswith(_TMP_PREFIXES):
                acc.items.append(_debris("cache", entry))
            else:
                acc.other += _walk(entry.path)[0]
    for part in _in_parallel(_cache_entries, found):
        acc.items += part.items
        acc.warnings += part.warnings
        acc.other += part.other


def _cache_entries(entries: list[os.DirEntry[str]]) -> _Acc:
    acc = _Acc()
    for entry in entries:
        _cache_entry(entry, acc)
    return acc


def _in_parallel(
    work: Callable[[list[os.DirEntry[str]]], _Acc], entries: list[os.DirEntry[str]]
) -> list[_Acc]:
    """``work`` over contiguous chunks, on threads when there are many entries.

    Reading 100,000 small meta.json files is system calls, which release the GIL.
    """
    workers = min(_MAX_THREADS, os.cpu_count() or 1)
    if workers < _PARALLEL_MIN_CPUS or len(entries) < _PARALLEL_FROM:
        return [work(entries)]
    from concurrent.futures import ThreadPoolExecutor

    size = -(-len(entries) // (workers * 4))
    chunks = [entries[i : i + size] for i in range(0, len(entries), size)]
    with ThreadPoolExecutor(workers, thread_name_prefix="accel-scan") as pool:
        return list(pool.map(work, chunks))


def _cache_entry(entry: os.DirEntry[str], acc: _Acc) -> None:
    meta_path = entry.path + os.sep + META
    try:
        meta = _read_json(meta_path)
    except FileNotFoundError:
        acc.items.append(_debris("cache", entry))  # puts rename whole folders: a torn delete
        return
    except (OSError, ValueError) as exc:
        acc.warnings.append(f"skipped {entry.path}: unreadable {META} ({exc})")
        acc.other += _walk(entry.path)[0]
        return
    try:
        size, created = int(meta["size"]), float(meta["created"])
        last_used = float(meta.get("last_used") or created)
        run_id = meta.get("run_id")
    except (KeyError, TypeError, ValueError):
        acc.warnings.append(f"skipped {entry.path}: {META} lacks size/created")
        acc.other += _walk(entry.path)[0]
        return
    acc.items.append(
        Item(
            "cache",
            "entry",
            entry.path,
            size,
            last_used,
            marker=META,
            name=str(meta.get("key") or entry.name[: -len(ENTRY_SUFFIX)]),
            run_id=run_id if isinstance(run_id, str) else None,
        )
    )


def _other_cache_size(cache_dir: Path) -> int:
    total = 0
    for entry in _children(cache_dir):
        if entry.name not in ("entries", FRAMEWORKS):
            total += _walk(entry.path)[0]
    return total


def _scan_frameworks(folder: Path, acc: _Acc) -> None:
    """One item per framework cache; its age is its newest file (frameworks record none)."""
    for entry in _children(folder):
        if not entry.is_dir(follow_symlinks=False):
            acc.other += _walk(entry.path)[0]
            continue
        size, newest = _walk(entry.path)
        acc.items.append(Item(FRAMEWORKS, "framework", entry.path, size, newest, name=entry.name))


# -- checkpoints --------------------------------------------------------------------------


def _scan_checkpoints(folder: Path, acc: _Acc) -> None:
    for series in _children(folder):
        if not series.is_dir(follow_symlinks=False):
            acc.items.append(_debris("checkpoints", series))
            continue
        for entry in _children(series.path):
            _checkpoint(series.name, entry, acc)


def _checkpoint(series: str, entry: os.DirEntry[str], acc: _Acc) -> None:
    match = _STEP_RE.fullmatch(entry.name)
    if match is None or not entry.is_dir(follow_symlinks=False):
        if entry.name.startswith(_TMP_PREFIXES) or match is not None:
            acc.items.append(_debris("checkpoints", entry, series=series))
        else:
            acc.other += _walk(entry.path)[0]
        return
    size, newest = _walk(entry.path)
    try:
        manifest = _read_json(entry.path + os.sep + MANIFEST)
        created = float(manifest.get("created") or newest)
        run_id = manifest.get("run_id")
    except FileNotFoundError:  # torn: the manifest is written last and removed first
        acc.items.append(_debris("checkpoints", entry, series=series, size=size, mtime=newest))
        return
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        acc.warnings.append(f"skipped {entry.path}: unreadable {MANIFEST} ({exc})")
        acc.other += size
        return
    acc.items.append(
        Item(
            "checkpoints",
            "checkpoint",
            entry.path,
            size,
            created,
            marker=MANIFEST,
            name=f"{series}/{entry.name}",
            series=series,
            step=int(match.group(1)),
            run_id=run_id if isinstance(run_id, str) else None,
        )
    )


# -- runs and logs ------------------------------------------------------------------------


def _scan_runs(folder: Path, acc: _Acc) -> None:
    for entry in _children(folder):
        if not entry.is_dir(follow_symlinks=False):
            acc.items.append(_debris("runs", entry))
            continue
        acc.items.append(_run(entry))


def _run(entry: os.DirEntry[str]) -> Item:
    size, newest = _walk(entry.path)
    record: Any = {}
    try:
        record = _read_json(entry.path + os.sep + RUN_RECORD)
    except (OSError, ValueError):
        pass
    record = record if isinstance(record, dict) else {}
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
        if entry.name in ("runs", TRAINING_LOG) or entry.is_dir(follow_symlinks=False):
            if entry.name != "runs":
                acc.other += _walk(entry.path)[0]
            continue
        if entry.name.startswith(_TMP_PREFIXES):
            acc.items.append(_debris("logs", entry))
            continue
        st = entry.stat(follow_symlinks=False)
        acc.items.append(Item("logs", "log", entry.path, st.st_size, st.st_mtime, name=entry.name))


def _scan_tmp(folder: Path, acc: _Acc) -> None:
    for entry in _children(folder):
        acc.items.append(_debris("cache", entry))


# -- helpers ------------------------------------------------------------------------------


def _debris(
    category: str,
    entry: os.DirEntry[str],
    *,
    series: str | None = None,
    size: int | None = None,
    mtime: float | None = None,
) -> Item:
    if size is None or mtime is None:
        size, mtime = _walk(entry.path)
    return Item(category, "debris", entry.path, size, mtime, name=entry.name, series=series)


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


def _files_size(folder: Path) -> int:
    total = 0
    for entry in _children(folder):
        if entry.is_file(follow_symlinks=False):
            total += entry.stat(follow_symlinks=False).st_size
    return total


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
