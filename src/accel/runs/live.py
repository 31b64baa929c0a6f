"""Liveness of a run: the launcher's exclusive ``flock`` on ``locks/run-<run-id>.lock``.

The kernel drops the lock when the launcher dies, even by SIGKILL, so liveness never
depends on what run.json says. The lock and the probe are :mod:`accel._locks`'.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from accel import _locks
from accel.errors import LockTimeout
from accel.layout import LOCK_SUFFIX, RUN_LOCK_PREFIX, Layout
from accel.layout import run_lock as run_lock_file

__all__ = ["held_unless_live", "is_live", "live_run_ids", "run_lock", "run_lock_path"]


def run_lock_path(layout: Layout, run_id: str) -> Path:
    return run_lock_file(layout.root, run_id)


@contextlib.contextmanager
def run_lock(layout: Layout, run_id: str, timeout: float = 10.0) -> Iterator[None]:
    """Hold the run's lock: the run is live exactly as long as this block runs.

    Probes by readers hold it for an instant, so the acquire retries until ``timeout``.
    The descriptor is close-on-exec so workers never inherit the lock.
    """
    path = run_lock_path(layout, run_id)
    try:
        fd = _locks.acquire(path, timeout, poll_interval=0.01)
    except LockTimeout:
        raise LockTimeout(f"run {run_id} is already live (lock {path})") from None
    try:
        yield
    finally:
        _locks.release(fd)


def is_live(layout: Layout, run_id: str) -> bool:
    """True while a launcher holds the run's lock (probed without blocking, never created)."""
    return _locks.held(run_lock_path(layout, run_id))


def live_run_ids(layout: Layout) -> set[str]:
    """Ids of the runs whose launcher is alive now (from the lock files, not run.json)."""
    return set(_locks.held_names(layout.locks_dir, RUN_LOCK_PREFIX, LOCK_SUFFIX))


@contextlib.contextmanager
def held_unless_live(layout: Layout, run_id: str) -> Iterator[None]:
    """Hold the run's lock for a moment, for a reader that rewrites its record; raises
    ``BlockingIOError`` while a launcher holds it. A missing lock file: nobody can."""
    with _locks.try_hold(run_lock_path(layout, run_id), create=False) as free:
        if not free:
            raise BlockingIOError(f"run {run_id} is live")
        yield
