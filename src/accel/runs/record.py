"""Run records: what ``accel launch`` left in ``logs/runs/<run-id>/run.json``, and liveness.

A run is *live* while its launcher holds the exclusive ``flock`` on
``locks/run-<run-id>.lock``. The kernel drops the lock when the launcher dies, even by
SIGKILL, so liveness never depends on what run.json says: a record that still says
``running`` without a live launcher is reported as ``crashed``.

Shared by ``accel launch`` (writer), ``accel runs``/``accel logs`` and ``accel clean``
(readers). Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel._redact import redact_mapping
from accel.errors import LockTimeout, UsageError, storage_error
from accel.layout import run_lock as run_lock_file

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = [
    "CRASHED",
    "FAILED",
    "INTERRUPTED",
    "RUNNING",
    "SUCCEEDED",
    "RunRecord",
    "is_live",
    "list_runs",
    "live_run_ids",
    "new_run_id",
    "read_record",
    "read_run",
    "records_this_run",
    "resolve_run_id",
    "run_dir",
    "run_lock",
    "run_lock_path",
]

RUN_FILE = "run.json"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
INTERRUPTED = "interrupted"
CRASHED = "crashed"  # derived: run.json says running but no launcher holds the lock


def new_run_id(now: datetime, token: str | None = None) -> str:
    """A sortable, unique id such as ``20261129-150240-3fa2c1``."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{token or secrets.token_hex(3)}"


def run_dir(ws: Workspace, run_id: str) -> Path:
    return ws.runs_dir / run_id


def run_lock_path(ws: Workspace, run_id: str) -> Path:
    return run_lock_file(ws.path, run_id)


@dataclass(frozen=True)
class RunRecord:
    """One run as recorded in its run.json; ``status`` already accounts for liveness."""

    id: str
    path: Path
    status: str
    live: bool
    name: str | None = None
    command: tuple[str, ...] = ()
    cwd: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    exit_code: int | None = None
    failed_rank: int | None = None
    error: Mapping[str, Any] | None = None
    restarts: int = 0
    nnodes: int | None = None
    world_size: int | None = None
    hostname: str | None = None
    pid: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def duration(self) -> float | None:
        """Seconds from start to end (to now while live); None when unknown."""
        start = _parse_time(self.started_at)
        if start is None:
            return None
        end = _parse_time(self.ended_at) or (datetime.now(timezone.utc) if self.live else None)
        return None if end is None else max(0.0, (end - start).total_seconds())

    def rank_logs(self) -> dict[int, Path]:
        """``rank -> rank-N.log`` for the logs present, in rank order."""
        found: dict[int, Path] = {}
        with contextlib.suppress(OSError):
            for entry in self.path.iterdir():
                name = entry.name
                stem = name[len("rank-") : -len(".log")]
                if name.startswith("rank-") and name.endswith(".log") and stem.isdigit():
                    found[int(stem)] = entry
        return dict(sorted(found.items()))


@contextlib.contextmanager
def run_lock(ws: Workspace, run_id: str, timeout: float = 10.0) -> Iterator[None]:
    """Hold the run's lock: the run is live exactly as long as this block runs.

    Probes by readers hold it for an instant, so the acquire retries until ``timeout``.
    The descriptor is close-on-exec so workers never inherit the lock.
    """
    import time

    path = run_lock_path(ws, run_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise storage_error(exc, "take the lock", path) from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(f"run {run_id} is already live (lock {path})") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def is_live(ws: Workspace, run_id: str) -> bool:
    """True while a launcher holds the run's lock (probed without blocking, never created)."""
    try:
        fd = os.open(run_lock_path(ws, run_id), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def live_run_ids(ws: Workspace) -> set[str]:
    """Ids of the runs whose launcher is alive now (from the lock files, not run.json)."""
    ids = set()
    with contextlib.suppress(OSError):
        for entry in ws.locks_dir.iterdir():
            name = entry.name
            if name.startswith("run-") and name.endswith(".lock"):
                run_id = name[len("run-") : -len(".lock")]
                if is_live(ws, run_id):
                    ids.add(run_id)
    return ids


def read_record(folder: Path) -> dict[str, Any] | None:
    """The run.json of the run folder ``folder`` (a JSON object), None when there is none
    or it is unreadable: the one reader of the format. Links are not followed."""
    import json

    try:
        fd = os.open(folder / RUN_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError, RecursionError):  # RecursionError: nested beyond json's reach
        return None
    return data if isinstance(data, dict) else None


def records_this_run(record: Mapping[str, Any] | None, folder: Path) -> bool:
    """True when ``record`` is the launcher's record of the run in ``folder`` (its ``id``
    is the folder's name): what proves to ``accel clean`` that accel made the folder."""
    return record is not None and record.get("id") == folder.name


def read_run(ws: Workspace, run_id: str) -> RunRecord:
    """The record of one run; a missing or unreadable run.json still gives a record."""
    folder = run_dir(ws, run_id)
    live = is_live(ws, run_id)
    # A record written by an older accel may hold secrets in clear: never show them.
    return _record(run_id, folder, redact_mapping(read_record(folder) or {}), live)


def list_runs(ws: Workspace) -> list[RunRecord]:
    """Every run folder's record, newest first."""
    return [read_run(ws, run_id) for run_id in _run_ids(ws)]


def resolve_run_id(ws: Workspace, ref: str | None) -> str:
    """``latest``/None, a full id or a unique prefix of one -> the run id."""
    ids = _run_ids(ws)
    if not ids:
        raise UsageError(f"no runs in {ws.runs_dir}; start one with `accel launch`")
    if ref in (None, "", "latest"):
        return ids[0]
    if ref in ids:
        return ref
    matches = [i for i in ids if i.startswith(ref) or i.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise UsageError(
            f"run {ref!r} is ambiguous: it matches {len(matches)} runs ({shown}); "
            "give more of the id"
        )
    raise UsageError(f"unknown run {ref!r}: see `accel runs` for the run ids")


def _run_ids(ws: Workspace) -> list[str]:
    try:
        names = [e.name for e in ws.runs_dir.iterdir() if e.is_dir()]
    except OSError:
        return []
    return sorted((n for n in names if not n.startswith(".")), reverse=True)


def _record(run_id: str, folder: Path, data: Mapping[str, Any], live: bool) -> RunRecord:
    stored = data.get("status") if isinstance(data.get("status"), str) else None
    if live:
        status = RUNNING
    elif stored in (None, RUNNING):
        status = CRASHED
    else:
        status = str(stored)
    return RunRecord(
        id=run_id,
        path=folder,
        status=status,
        live=live,
        name=_opt(data, "name", str),
        command=tuple(str(a) for a in data.get("command") or ()),
        cwd=_opt(data, "cwd", str),
        started_at=_opt(data, "started_at", str),
        ended_at=_opt(data, "ended_at", str),
        exit_code=_opt(data, "exit_code", int),
        failed_rank=_opt(data, "failed_rank", int),
        error=data.get("error") if isinstance(data.get("error"), dict) else None,
        restarts=_opt(data, "restarts", int) or 0,
        nnodes=_opt(data, "nnodes", int),
        world_size=_opt(data, "world_size", int),
        hostname=_opt(data, "hostname", str),
        pid=_opt(data, "pid", int),
        raw=dict(data),
    )


def _opt(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if isinstance(value, bool) and kind is int:
        return None
    return value if isinstance(value, kind) else None


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def iter_live(ws: Workspace) -> Iterator[RunRecord]:
    """Records of the live runs only."""
    for run_id in sorted(live_run_ids(ws), reverse=True):
        yield read_run(ws, run_id)


# -- self-healing ------------------------------------------------------------------------


def mark_crashed(ws: Workspace) -> list[str]:
    """Rewrite as ``crashed`` every run.json that says ``running`` with no live launcher.

    Called by the commands that look at runs (``runs``, ``status``, ``env``, ``clean``):
    the first to notice heals the record, so run.json stops contradicting the lock.
    Holds the run's lock while rewriting, so a launcher can never be live meanwhile.
    Best effort: an unwritable workspace is left as it is. Returns the ids marked.
    """
    marked = []
    for run_id in _run_ids(ws):
        stored = (read_record(run_dir(ws, run_id)) or {}).get("status")
        with contextlib.suppress(OSError):
            if stored == RUNNING and _heal(ws, run_id):
                marked.append(run_id)
    return marked


def _heal(ws: Workspace, run_id: str) -> bool:
    from accel.fsutil import PRIVATE_MODE, atomic_write_json, tree_usage

    folder = run_dir(ws, run_id)
    try:
        fd = os.open(run_lock_path(ws, run_id), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None  # no lock file: no launcher can hold it
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while live
        data = read_record(folder) or {}
        if data.get("status") != RUNNING:
            return False  # the launcher finished it meanwhile
        newest = tree_usage(folder).newest
        ended = datetime.fromtimestamp(newest, timezone.utc).astimezone() if newest else None
        data.update(
            status=CRASHED,
            ended_at=data.get("ended_at")
            or (ended.isoformat(timespec="seconds") if ended else None),
            crashed="the launcher died without finishing the record (SIGKILL, power loss)",
        )
        # Rewritten as the launcher writes it: private, and secrets of older records hidden.
        path = folder / RUN_FILE
        atomic_write_json(path, redact_mapping(data), durable=False, perms=PRIVATE_MODE)
        return True
    finally:
        if fd is not None:
            os.close(fd)
