"""The lease of a checkpoint series: one live run saves into a series at a time.

``locks/series-<name>.lock`` is an flock held for the holder's whole life: the kernel
releases it when the holder dies, even by SIGKILL, so a dead holder's lease is taken
over at once. ``locks/series-<name>.holder.json`` says who holds it
(``{pid, host, run_id, since}``) for error messages and for the workers of a run:
``accel launch`` holds the lease in the launcher, and a worker whose ``ACCEL_RUN_ID``
equals the holder's ``run_id`` while the flock is held saves without acquiring it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from accel.errors import AccelError
from accel.fsutil import atomic_write_json, read_json
from accel.layout import series_holder, series_lock

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["LeaseHeld", "LeaseHolder", "SeriesLease", "holder_of"]

# A probe by holder_of() holds a free flock for microseconds; a saver that collides
# with it retries for this long instead of failing.
_ACQUIRE_WAIT = 0.5


class LeaseHeld(AccelError):
    """Another live process holds the series."""

    exit_code = 1


@dataclass(frozen=True)
class LeaseHolder:
    pid: int
    host: str
    run_id: str | None
    since: float


def _lock_file(ws: Workspace, series: str) -> Path:
    return series_lock(ws.path, series)


def _holder_file(ws: Workspace, series: str) -> Path:
    return series_holder(ws.path, series)


def read_holder(ws: Workspace, series: str) -> LeaseHolder | None:
    """What holder.json says, whether or not that holder is still alive."""
    try:
        data: Any = read_json(_holder_file(ws, series))
        return LeaseHolder(
            pid=int(data["pid"]),
            host=str(data["host"]),
            run_id=None if data.get("run_id") is None else str(data["run_id"]),
            since=float(data["since"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _flock_is_free(path: Path) -> bool:
    probe = FileLock(str(path), timeout=0)
    try:
        probe.acquire()
    except Timeout:
        return False
    probe.release()
    return True


def holder_of(ws: Workspace, series: str) -> LeaseHolder | None:
    """The live holder of ``series``, None when nobody holds it (for ``accel clean``)."""
    path = _lock_file(ws, series)
    if _held_here(path) or (path.exists() and not _flock_is_free(path)):
        return read_holder(ws, series) or LeaseHolder(-1, "unknown", None, 0.0)
    return None


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

    def __init__(self, ws: Workspace, series: str, run_id: str | None = None) -> None:
        self.ws = ws
        self.series = series
        self.run_id = run_id
        self.lock_file = _lock_file(ws, series)
        self.holder_file = _holder_file(ws, series)
        self._lock: FileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.is_locked

    def acquire(self) -> SeriesLease:
        """Take the lease now; :class:`LeaseHeld` naming the live holder otherwise."""
        with _HELD_LOCK:
            if self.held:
                return self
            self.ws.ensure()
            # Not thread-local: an async save checks the lease from its own thread.
            lock = FileLock(str(self.lock_file), timeout=_ACQUIRE_WAIT, thread_local=False)
            try:
                lock.acquire()
            except Timeout:
                raise self._held_error() from None
            self._lock = lock
            atomic_write_json(self.holder_file, self._holder_record())
            _HELD[str(self.lock_file)] = (os.getpid(), self)
        return self

    def release(self) -> None:
        with _HELD_LOCK:
            if self._lock is None:
                return
            if _HELD.get(str(self.lock_file), (0, None))[1] is self:
                del _HELD[str(self.lock_file)]
            # holder.json stays: without the flock it names nobody alive.
            self._lock.release()
            self._lock = None

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
        holder = read_holder(self.ws, self.series)
        who = f"pid {holder.pid} on {holder.host}" if holder else "another process"
        run = f" (run {holder.run_id})" if holder and holder.run_id else ""
        return LeaseHeld(
            f"checkpoint series {self.series!r} is held by {who}{run}; wait for that run to "
            "end, or save under another name with --run-name or ACCEL_RUN_NAME"
        )


def ensure_lease(ws: Workspace, series: str, run_id: str | None) -> SeriesLease | None:
    """Make sure this process may save into ``series``; take the lease if needed.

    None when the lease belongs to this process's run (held by its launcher).
    """
    path = _lock_file(ws, series)
    own = _held_here(path)
    if own is not None:
        return own
    if run_id is not None:
        holder = read_holder(ws, series)
        if holder is not None and holder.run_id == run_id and not _flock_is_free(path):
            return None
    return SeriesLease(ws, series, run_id).acquire()
