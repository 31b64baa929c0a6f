"""The lease of a checkpoint series: one live run saves into a series at a time.

``locks/series-<name>.lock`` is an flock held for the holder's whole life: the kernel
releases it when the holder dies, even by SIGKILL, so a dead holder's lease is taken
over at once. ``locks/series-<name>.holder.json`` says who holds it
(``{pid, host, run_id, since}``) for error messages and for the workers of a run.

A run takes its series at its first save (rank 0 takes the lease), so runs that never
save never collide. Once taken, the series stays the run's until the run ends: while
the run named in holder.json is live (its launcher holds ``locks/run-<id>.lock``), a
process of another run is refused the lease even when the flock is free, so a worker
restart (rank 0 dies, the kernel drops its flock) never hands the series to a rival.
A worker whose ``ACCEL_RUN_ID`` equals the holder's ``run_id`` while the flock is held
saves without acquiring it.

**Retention** (``checkpoints.keep_last``) is the holder's to apply, right after each
commit, unless a reader (``accel checkpoints export``, ``show``, ``verify``) holds the
series' readers lock: it then removes nothing and records what it owes in
``locks/series-<name>.retention.json`` (``{"keep_last": n}``, the run's own setting).
The run's next save pays; once no live run holds the series, so does the reader that
held it back as it lets go (the last one, when several read), and ``accel launch``
when its run ends: a run whose last saves met a long export does not end with every
checkpoint it saved. The record is data like any file of the workspace: only a
positive integer is taken from it, anything else is left alone (``accel clean``
applies the configured retention all the same).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel import _locks
from accel._fs import atomic_write_json, read_json
from accel.errors import AccelError, DamagedFile, LeaseHeld, LockTimeout
from accel.identity import ensure
from accel.layout import (
    HOLDER_SUFFIX,
    LOCKS_DIR,
    SERIES_LOCK_PREFIX,
    Layout,
    run_lock,
    series_holder,
    series_lock,
    series_readers_lock,
)
from accel.store import series as series_mod

__all__ = [
    "LeaseHeld",
    "LeaseHolder",
    "SeriesLease",
    "apply_retention",
    "catch_up_retention",
    "claimed_by_live_runs",
    "held_message",
    "holder_of",
    "retention_owed",
]

# A probe by holder_of() holds a free flock for microseconds; a saver that collides
# with it retries for this long instead of failing.
_ACQUIRE_WAIT = 0.5
# What a run id read back from holder.json may look like before it names a lock file.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class LeaseHolder:
    pid: int
    host: str
    run_id: str | None
    since: float


def read_holder(layout: Layout, series: str) -> LeaseHolder | None:
    """What holder.json says, whether or not that holder is still alive."""
    return _read_holder_file(series_holder(layout.root, series))


def _read_holder_file(path: Path) -> LeaseHolder | None:
    try:
        data: Any = read_json(path)
        return LeaseHolder(
            pid=int(data["pid"]),
            host=str(data["host"]),
            run_id=None if data.get("run_id") is None else str(data["run_id"]),
            since=float(data["since"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def holder_of(layout: Layout, series: str) -> LeaseHolder | None:
    """The live holder of ``series``, None when nobody holds it (for ``accel clean``).

    The flock's holder, or the live run that saved into the series last (between a
    worker's death and its restart's first save nobody holds the flock).
    """
    path = series_lock(layout.root, series)
    if _held_here(path) or _locks.held(path):
        return read_holder(layout, series) or LeaseHolder(-1, "unknown", None, 0.0)
    holder = read_holder(layout, series)
    return holder if _run_is_live(layout, holder) else None


def _run_is_live(layout: Layout, holder: LeaseHolder | None) -> bool:
    """True while the run ``holder`` names is live (its launcher holds the run lock)."""
    return _live_run(layout.root, holder)


def _live_run(root: Path, holder: LeaseHolder | None) -> bool:
    if holder is None or holder.run_id is None or not _RUN_ID.fullmatch(holder.run_id):
        return False  # no run, or a name no run lock of this workspace can have
    return _locks.held(run_lock(root, holder.run_id))


def claimed_by_live_runs(locks_dir: Path) -> frozenset[str]:
    """The series whose last saver's run is live, flock held or not (for ``accel clean``:
    a run between a worker's death and its restart's first save keeps its series)."""
    names = set()
    try:
        entries = [e.name for e in os.scandir(locks_dir)]
    except OSError:
        return frozenset()
    for name in entries:
        ours = name.startswith(SERIES_LOCK_PREFIX) and name.endswith(HOLDER_SUFFIX)
        if ours and _live_run(locks_dir.parent, _read_holder_file(locks_dir / name)):
            names.add(name[len(SERIES_LOCK_PREFIX) : -len(HOLDER_SUFFIX)])
    return frozenset(names)


def held_message(series: str, holder: LeaseHolder | None) -> str:
    """The one line naming who holds ``series`` and the way out."""
    who = f"pid {holder.pid} on {holder.host}" if holder else "another process"
    run = f" (run {holder.run_id})" if holder and holder.run_id else ""
    return (
        f"checkpoint series {series!r} is held by {who}{run}; wait for that run to "
        "end, or save under another name with --run-name or ACCEL_RUN_NAME"
    )


# Leases this process holds, by lock file: two Workspace objects of one process share
# one lease (a second flock on the same file from the same process would conflict).
_HELD: dict[str, tuple[int, SeriesLease]] = {}
_HELD_LOCK = threading.Lock()


def _held_here(path: Path) -> SeriesLease | None:
    entry = _HELD.get(str(path))
    # After fork the child inherits the table but is not the holder it names.
    if entry is None or entry[0] != os.getpid():
        return None
    return entry[1]


class SeriesLease:
    """Hold the right to save into ``series`` for the life of this process."""

    def __init__(self, layout: Layout, series: str, run_id: str | None = None) -> None:
        self.layout = layout
        self.series = series
        self.run_id = run_id
        self.lock_file = series_lock(layout.root, series)
        self.holder_file = series_holder(layout.root, series)
        self._fd: int | None = None  # the descriptor holding the flock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> SeriesLease:
        """Take the lease now; :class:`LeaseHeld` naming the live holder otherwise."""
        with _HELD_LOCK:
            if self.held:
                return self
            ensure(self.layout)
            try:
                self._fd = _locks.acquire(self.lock_file, _ACQUIRE_WAIT, poll_interval=0.01)
            except LockTimeout:
                raise self._held_error() from None
            previous = read_holder(self.layout, self.series)
            # The series of a live run whose workers are restarting stays that run's.
            if previous and previous.run_id != self.run_id and _run_is_live(self.layout, previous):
                _locks.release(self._fd)
                self._fd = None
                raise LeaseHeld(held_message(self.series, previous))
            atomic_write_json(self.holder_file, self._holder_record())
            _HELD[str(self.lock_file)] = (os.getpid(), self)
        return self

    def release(self) -> None:
        with _HELD_LOCK:
            if self._fd is None:
                return
            if _HELD.get(str(self.lock_file), (0, None))[1] is self:
                del _HELD[str(self.lock_file)]
            # holder.json stays: without the flock it names nobody alive.
            _locks.release(self._fd)
            self._fd = None

    def __enter__(self) -> SeriesLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _holder_record(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "run_id": self.run_id,
            "since": time.time(),
            "series": self.series,
        }

    def _held_error(self) -> LeaseHeld:
        return LeaseHeld(held_message(self.series, read_holder(self.layout, self.series)))


def ensure_lease(layout: Layout, series: str, run_id: str | None) -> SeriesLease | None:
    """Make sure this process may save into ``series``; take the lease if needed.

    None when the lease belongs to this process's run (held by its launcher).
    """
    path = series_lock(layout.root, series)
    own = _held_here(path)
    if own is not None:
        return own
    if run_id is not None:
        holder = read_holder(layout, series)
        if holder is not None and holder.run_id == run_id and _locks.held(path):
            return None
    return SeriesLease(layout, series, run_id).acquire()


# -- retention: what a reader held back, and its catch-up ------------------------------

OWED_SUFFIX = ".retention.json"
_MAX_KEEP = 10**9


def _owed_file(layout: Layout, series: str) -> Path:
    return layout.root / LOCKS_DIR / f"{SERIES_LOCK_PREFIX}{series}{OWED_SUFFIX}"


def apply_retention(
    layout: Layout,
    series: str,
    keep: int,
    keep_step: int | None = None,
    reaper: series_mod.Reaper | None = None,
) -> bool:
    """Retire all but the newest ``keep`` checkpoints of ``series`` (and ``keep_step``).
    False, and the debt recorded, when a reader holds the series: nothing is removed."""
    with _locks.try_hold(series_readers_lock(layout.root, series), create=True) as free:
        if not free:
            _record(layout, series, keep)
            return False
        found = series_mod.view(layout.checkpoints_dir / series).checkpoints
        survivors = {f.manifest.step for f in found[-keep:]} | {keep_step}
        for old in (f for f in found if f.manifest.step not in survivors):
            if kept := series_mod.retire_checkpoint(old, reaper):
                series_mod.warn_kept(layout, old.path, kept)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_owed_file(layout, series))
        return True


def _record(layout: Layout, series: str, keep: int) -> None:
    owed_file = _owed_file(layout, series)
    if _owed_keep(owed_file) == keep:
        return  # owed already: no write at every save an export spans
    with contextlib.suppress(OSError):  # a debt unrecorded is paid by a later save or clean
        atomic_write_json(owed_file, {"keep_last": keep}, durable=False)


def retention_owed(layout: Layout) -> dict[str, int]:
    """``{series: keep_last}`` of the retention held back by readers and not yet paid."""
    try:
        names = os.listdir(layout.root / LOCKS_DIR)
    except OSError:
        return {}
    debts = {}
    for name in names:
        if not (name.startswith(SERIES_LOCK_PREFIX) and name.endswith(OWED_SUFFIX)):
            continue
        series = name[len(SERIES_LOCK_PREFIX) : -len(OWED_SUFFIX)]
        if series_mod.is_series_name(series):
            keep = _owed_keep(layout.root / LOCKS_DIR / name)
            if keep is not None:
                debts[series] = keep
    return debts


def _owed_keep(path: Path) -> int | None:
    """The ``keep_last`` a retention record holds; None for none, or one accel did not
    write (not a regular file, not JSON, not a positive integer)."""
    try:
        record = read_json(path, limit=4096)
    except (OSError, DamagedFile):
        return None
    keep = record.get("keep_last") if isinstance(record, dict) else None
    return keep if type(keep) is int and 1 <= keep <= _MAX_KEEP else None


def catch_up_retention(layout: Layout) -> list[str]:
    """Pay every debt of a series that no live run holds and no reader reads: the
    series whose retention ran (for a message, if any). Never raises for a series it
    could not pay: that debt stays, for a later save, catch-up or ``accel clean``."""
    debts = retention_owed(layout)
    if not debts:
        return []
    live = claimed_by_live_runs(layout.root / LOCKS_DIR)
    paid = []
    for series, keep in sorted(debts.items()):
        if series in live or _locks.held(series_lock(layout.root, series)):
            continue  # its run is live: its next save pays, or this catch-up at its end
        with contextlib.suppress(AccelError, OSError):
            if apply_retention(layout, series, keep):
                paid.append(series)
    return paid
