"""Run records: what ``accel launch`` left in ``logs/runs/<run-id>/run.json``.

A run is *live* while its launcher holds its lock (:mod:`accel.runs.live`), so liveness
never depends on what run.json says: a record that still says ``running`` without a
live launcher is reported as ``crashed``.

The one reader (:func:`read_record`) and writer (:func:`write_record`) of run.json:
``accel launch`` writes, ``accel runs``/``accel logs``/``accel clean`` read. The reader
is tolerant: a missing, damaged, linked or hostile file gives an empty record, never an
error. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from accel._redact import redact_mapping
from accel.errors import UsageError
from accel.layout import LOCAL_RUN, LOG_SUFFIX, RANK_PREFIX, RUN_RECORD, Layout
from accel.runs.live import held_unless_live, is_live
from accel.runs.status import RunStatus, parse
from accel.units import parse_time

__all__ = [
    "RUN_FILE",
    "RunRecord",
    "list_runs",
    "mark_crashed",
    "new_run_id",
    "read_record",
    "read_run",
    "records_this_run",
    "resolve_run_id",
    "run_dir",
    "write_record",
]

RUN_FILE = RUN_RECORD
# The status shown for a run whose record is there but cannot be read (never "crashed":
# nothing says it did).
UNREADABLE = "unreadable"


def new_run_id(now: datetime, token: str | None = None) -> str:
    """A sortable, unique id such as ``20261129-150240-3fa2c1``."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{token or secrets.token_hex(3)}"


def run_dir(layout: Layout, run_id: str) -> Path:
    return layout.runs_dir / run_id


@dataclass(frozen=True)
class RunRecord:
    """One run as recorded in its run.json; ``status`` already accounts for liveness
    (a status this accel does not know stays the text it is)."""

    id: str
    path: Path
    status: RunStatus | str
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
    problem: str | None = None  # why its run.json is unreadable (a FIFO, a deep nest, ...)

    @property
    def duration(self) -> float | None:
        """Seconds from start to end (to now while live); None when unknown."""
        start = parse_time(self.started_at)
        if start is None:
            return None
        end = parse_time(self.ended_at) or (datetime.now(timezone.utc) if self.live else None)
        return None if end is None else max(0.0, (end - start).total_seconds())

    @classmethod
    def from_json(cls, run_id: str, folder: Path, data: Mapping[str, Any], live: bool) -> RunRecord:
        """The typed record of ``data`` (a run.json as read); fields of the wrong type are
        left unset, ``raw`` keeps it all. ``live``: whether a launcher holds the run now."""
        stored = parse(data.get("status"))
        status: RunStatus | str
        if live:
            status = RunStatus.RUNNING
        elif run_id == LOCAL_RUN and not data:  # a script's metrics outside a launch
            status = "outside accel launch"
        elif stored in (None, RunStatus.RUNNING):
            status = RunStatus.CRASHED
        else:
            status = stored
        return cls(
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

    def rank_logs(self) -> dict[int, Path]:
        """``rank -> rank-N.log`` for the logs present, in rank order."""
        found: dict[int, Path] = {}
        with contextlib.suppress(OSError):
            for entry in self.path.iterdir():
                name = entry.name
                stem = name[len(RANK_PREFIX) : -len(LOG_SUFFIX)]
                if name.startswith(RANK_PREFIX) and name.endswith(LOG_SUFFIX) and stem.isdigit():
                    found[int(stem)] = entry
        return dict(sorted(found.items()))


RECORD_MAX_BYTES = 16 << 20  # a record with its failures' tails is well under 1 MiB


def read_record(folder: Path) -> dict[str, Any] | None:
    """The run.json of the run folder ``folder`` (a JSON object), None when there is none
    or it is unreadable: the one reader of the format. Links are not followed, a FIFO or
    device is not waited on, a record nested or numbered beyond any run's is unreadable."""
    return _load_record(folder)[0]


def _load_record(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the record, None), (None, None) when there is none, (None, why) when it is there
    but unreadable."""
    from accel._fs import read_json

    path = folder / RUN_FILE
    try:
        data = read_json(path, limit=RECORD_MAX_BYTES)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:  # DamagedFile is a ValueError
        return None, str(exc)
    if not isinstance(data, dict):
        return None, f"{path} does not hold a JSON object"
    return data, None


def records_this_run(record: Mapping[str, Any] | None, folder: Path) -> bool:
    """True when ``record`` is the launcher's record of the run in ``folder`` (its ``id``
    is the folder's name): what proves to ``accel clean`` that accel made the folder."""
    return record is not None and record.get("id") == folder.name


def write_record(folder: Path, record: Mapping[str, Any], secrets: Sequence[str] = ()) -> None:
    """Write the run.json of ``folder`` atomically, private, every secret in it hidden
    (``secrets``: the values the launcher knows, scrubbed wherever they appear)."""
    from accel._fs import PRIVATE_MODE, atomic_write_json

    path = folder / RUN_FILE
    atomic_write_json(path, redact_mapping(record, secrets), durable=False, perms=PRIVATE_MODE)


def read_run(layout: Layout, run_id: str) -> RunRecord:
    """The record of one run; a missing or unreadable run.json still gives a record."""
    folder = run_dir(layout, run_id)
    live = is_live(layout, run_id)
    data, problem = _load_record(folder)
    # A record written by an older accel may hold secrets in clear: never show them.
    record = RunRecord.from_json(run_id, folder, redact_mapping(data or {}), live)
    if problem is None:
        return record
    return replace(record, problem=problem, status=record.status if live else UNREADABLE)


def list_runs(layout: Layout) -> list[RunRecord]:
    """Every run folder's record, newest first."""
    return [read_run(layout, run_id) for run_id in _run_ids(layout)]


MIN_PART = 4  # characters of a run id's inner part that name a run (a shorter one is a guess)


def resolve_run_id(layout: Layout, ref: str | None) -> str:
    """``latest``/None, a full id or a unique part of one -> the run id.

    A part is any piece of the id of :data:`MIN_PART` characters or more (``151347``,
    the time of ``20261129-151347-3fa2c1``); a shorter one must be its start or end.
    """
    ids = _run_ids(layout)
    if not ids:
        raise UsageError(f"no runs in {layout.runs_dir}; start one with `accel launch`")
    if ref in (None, "", "latest"):
        return ids[0]
    if ref in ids:
        return ref
    if len(ref) >= MIN_PART:
        matches = [i for i in ids if ref in i]
    else:
        matches = [i for i in ids if i.startswith(ref) or i.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise UsageError(
            f"run {ref!r} is ambiguous: it matches {len(matches)} runs ({shown}); "
            "give more of the id"
        )
    raise UsageError(f"unknown run {ref!r}: see `accel runs` for the run ids")


def _run_ids(layout: Layout) -> list[str]:
    try:
        names = [e.name for e in layout.runs_dir.iterdir() if e.is_dir()]
    except OSError:
        return []
    return sorted((n for n in names if not n.startswith(".")), reverse=True)


def _opt(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if isinstance(value, bool) and kind is int:
        return None
    return value if isinstance(value, kind) else None


# -- self-healing ------------------------------------------------------------------------


def mark_crashed(layout: Layout) -> list[str]:
    """Rewrite as ``crashed`` every run.json that says ``running`` with no live launcher.

    Called by the commands that look at runs (``runs``, ``status``, ``env``, ``clean``):
    the first to notice heals the record, so run.json stops contradicting the lock.
    Holds the run's lock while rewriting, so a launcher can never be live meanwhile.
    Best effort: an unwritable workspace is left as it is. Returns the ids marked.
    """
    marked = []
    for run_id in _run_ids(layout):
        stored = (read_record(run_dir(layout, run_id)) or {}).get("status")
        with contextlib.suppress(OSError):
            if stored == RunStatus.RUNNING and _heal(layout, run_id):
                marked.append(run_id)
    return marked


def _heal(layout: Layout, run_id: str) -> bool:
    from accel._fs import tree_usage

    folder = run_dir(layout, run_id)
    with held_unless_live(layout, run_id):  # BlockingIOError while live
        data = read_record(folder) or {}
        if data.get("status") != RunStatus.RUNNING:
            return False  # the launcher finished it meanwhile
        newest = tree_usage(folder).newest
        ended = datetime.fromtimestamp(newest, timezone.utc).astimezone() if newest else None
        data.update(
            status=RunStatus.CRASHED,
            ended_at=data.get("ended_at")
            or (ended.isoformat(timespec="seconds") if ended else None),
            crashed="the launcher died without finishing the record (SIGKILL, power loss)",
        )
        # Rewritten as the launcher writes it: private, and secrets of older records hidden.
        write_record(folder, data)
        return True
