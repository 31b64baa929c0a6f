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
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

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
    "note_settled",
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


# What a spare node's run means (``"spare": true``), as every command says it.
SPARE_UNUSED = "the job ended before this spare node was needed; no worker ran here"

SUBSECOND_SLOTS = 4096  # the suffix's first three hex digits: 1/4096 s each


def new_run_id(now: datetime, token: str | None = None) -> str:
    """A sortable, unique id such as ``20261129-150240-3fa2c1``: the start time (UTC, to
    the second), then six hex digits, the first three the instant within that second
    (in 1/4096 s) and the last three random, so that runs started within one second
    sort in the order they started, too (``latest`` is the last one started)."""
    utc = now.astimezone(timezone.utc)
    if token is None:
        slot = utc.microsecond * SUBSECOND_SLOTS // 1_000_000
        token = f"{slot:03x}{int.from_bytes(os.urandom(2), 'big') % 4096:03x}"
    return f"{utc:%Y%m%d-%H%M%S}-{token}"


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
    def spare(self) -> bool:
        """The run of a spare node of an elastic job that ended before it was needed:
        no worker ran (``accel launch`` notes it; a hand-edited value other than true
        is not it)."""
        return self.raw.get("spare") is True

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


def list_runs(layout: Layout, limit: int | None = None) -> list[RunRecord]:
    """The run folders' records, newest first: the newest ``limit`` (None or 0: all).

    Only those records are read: the order is the ids' (a listing), so ``accel runs``
    costs the rows it shows, however many runs the workspace keeps.
    """
    ids = _run_ids(layout)
    return [read_run(layout, run_id) for run_id in (ids[:limit] if limit else ids)]


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
    return [run_id for run_id, _ in _run_folders(layout) or ()]


def _run_folders(layout: Layout) -> list[tuple[str, int]] | None:
    """``(id, inode)`` of every run folder, newest first; None when the folder of runs
    cannot be listed. One directory listing: no record is read, and no folder is
    stat'ed (a link to one is, to follow it).

    Newest first is by name: an id begins with its start time (UTC, to the second, the
    same instant as the record's ``started_at``), so the order is the records' own
    whatever the clock did; within one second, by the suffix's fraction of it.
    """
    try:
        with os.scandir(layout.runs_dir) as it:
            found = [(e.name, e.inode()) for e in it if e.name[:1] != "." and _is_dir(e)]
    except OSError:
        return None
    return sorted(found, reverse=True)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # a link to a folder counts, as it always has
    except OSError:
        return False


def _opt(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    if isinstance(value, bool) and kind is int:
        return None
    return value if isinstance(value, kind) else None


# -- self-healing ------------------------------------------------------------------------
#
# A record can say "running" only until its launcher's last write, or a heal's. So the
# heal skips the records a launcher noted final in one index, ``locks/runs-settled.json``
# (``{"version", "runs": [device, inode] of logs/runs, "settled": {run id: inode of its
# folder}}``), and reads the others: a command pays a listing of the runs and the reads
# of the live and the new ones, not a read of every run ever kept.
#
# Why the index never hides a record that can still say "running":
# - an id goes in only once its record was read final: ``succeeded``, ``failed``,
#   ``interrupted`` (a launcher's last write) or ``crashed`` (a heal's), or any other
#   status, or an unreadable record, read after its launcher was seen gone (probed
#   *before* the read: nothing but a heal, which rewrites only "running", writes a record
#   after its launcher). A folder without a record is read again: a pull may bring one;
# - an entry counts only for the very folder it was read from (the folder's inode, in a
#   ``logs/runs`` of that device and inode): a run folder pulled, restored or copied in
#   under a name the index knows is another folder, and is read;
# - the index is a shortcut, never the truth: written atomically (temp file + rename),
#   and when it is missing, damaged, unreadable or of another folder, it is ignored:
#   every record is read, as before it existed. Two launchers ending at once: the last
#   write wins, and what the other noted is read until the next one notes it again.
# Only a launcher writes it, at the end of its run (:func:`note_settled`): the commands
# that heal read the workspace and write nothing but the records they heal, so
# ``clean --dry-run`` and a refused command leave it as it was. So a SIGKILLed launcher
# (which never gets to note), an older accel's launcher and a pulled run all leave a
# record the next heal reads; a workspace of an older accel is read whole by each command
# until the first launch of this accel notes its runs.

SETTLED_VERSION = 1
_FINAL = frozenset(
    s.value
    for s in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED, RunStatus.CRASHED)
)


def mark_crashed(layout: Layout) -> list[str]:
    """Rewrite as ``crashed`` every run.json that says ``running`` with no live launcher.

    Called by the commands that look at runs (``runs``, ``status``, ``env``, ``clean``):
    the first to notice heals the record, so run.json stops contradicting the lock.
    Holds the run's lock while rewriting, so a launcher can never be live meanwhile.
    Reads only the records no launcher noted final (see above). Best effort: an
    unwritable workspace is left as it is. Returns the ids marked, newest first.
    """
    return _sweep(layout, heal=True).marked


def note_settled(layout: Layout) -> None:
    """Note in ``locks/runs-settled.json`` every run whose record is final now, so the
    heals to come skip them: what ``accel launch`` does at the end of its run (it heals
    nothing). Best effort: a read-only, full or odd ``locks/`` leaves the index as it
    was, and the heals read those records. Never makes a folder."""
    _, here, known, settled = _sweep(layout, heal=False)
    if here is None or settled == known or not layout.locks_dir.is_dir():
        return
    import json

    from accel._fs import atomic_write

    doc = {"version": SETTLED_VERSION, "runs": here, "settled": settled}
    with contextlib.suppress(OSError):
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        atomic_write(layout.settled_runs_file, text, durable=False)


class _Swept(NamedTuple):
    marked: list[str]  # the runs healed
    here: list[int] | None  # the folder of runs' key
    known: dict[str, int]  # the index as read
    settled: dict[str, int]  # the settled runs now


def _sweep(layout: Layout, *, heal: bool) -> _Swept:
    """One look at every run folder the index does not hold as settled; ``heal``: mark
    the crashed ones (the commands), else leave them to those (the launcher's note)."""
    here = _runs_folder_key(layout)
    folders = _run_folders(layout)
    known = _read_settled(layout, here)
    if folders is None:
        return _Swept([], None, known, known)
    settled: dict[str, int] = {}
    marked = []
    for run_id, inode in folders:
        if known.get(run_id) != inode:  # new, still open, or another folder of that name
            final, healed = _look(layout, run_id, heal)
            if healed:
                marked.append(run_id)
            if not final:
                continue
        settled[run_id] = inode
    return _Swept(marked, here, known, settled)


def _look(layout: Layout, run_id: str, heal: bool) -> tuple[bool, bool]:
    """(whether the run's record is final now, whether this call healed it)."""
    gone = not is_live(layout, run_id)  # before the read: see above
    data, problem = _load_record(run_dir(layout, run_id))
    if data is None and problem is None:
        return False, False  # no record yet: one may still come (a launch, a pull)
    stored = (data or {}).get("status")
    if stored == RunStatus.RUNNING:
        with contextlib.suppress(OSError):
            if heal and _heal(layout, run_id):
                return True, True
        return False, False
    # Else what it says (or that it is unreadable) is its last word once the launcher is gone.
    return (isinstance(stored, str) and stored in _FINAL) or gone, False


def _runs_folder_key(layout: Layout) -> list[int] | None:
    try:
        st = os.stat(layout.runs_dir)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def _read_settled(layout: Layout, here: list[int] | None) -> dict[str, int]:
    """``{run id: folder inode}`` of the settled runs of the folder ``here``; {} when there
    is no index, it cannot be read, or it describes another folder."""
    from accel._fs import read_json

    if here is None:
        return {}
    try:
        data = read_json(layout.settled_runs_file)
    except (OSError, ValueError):  # DamagedFile is a ValueError
        return {}
    if not isinstance(data, dict) or data.get("version") != SETTLED_VERSION:
        return {}
    settled = data.get("settled")
    if data.get("runs") != here or not isinstance(settled, dict):
        return {}
    return {run_id: inode for run_id, inode in settled.items() if type(inode) is int}


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
