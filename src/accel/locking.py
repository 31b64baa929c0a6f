"""File locks: one lock file per resource, never deleted, every acquire bounded.

Unlinking a lock file would split waiters across two inodes, so lock files stay.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from accel.errors import LockTimeout, storage_error

if TYPE_CHECKING:
    from accel.workspace import Workspace

DEFAULT_TIMEOUT = 60.0


def lock_timeout(ws: Workspace | None) -> float:
    if ws is None:
        return DEFAULT_TIMEOUT
    try:
        return float(ws.config["store.lock_timeout"])
    except Exception:  # noqa: BLE001 - an invalid config must not make locks unbounded
        return DEFAULT_TIMEOUT


@contextlib.contextmanager
def locked(
    path: Path,
    ws: Workspace | None = None,
    timeout: float | None = None,
    *,
    poll_interval: float = 0.05,
) -> Iterator[None]:
    """Hold the lock at ``path``; :class:`LockTimeout` naming it after ``timeout`` seconds.

    ``poll_interval``: how often a waiter retries. Hot locks held for a millisecond
    (the store's) poll faster, or waiters sleep while the lock sits free.
    """
    from filelock import FileLock, Timeout

    wait = lock_timeout(ws) if timeout is None else timeout
    lock = FileLock(str(path), timeout=wait, poll_interval=poll_interval)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise LockTimeout(
            f"timed out after {wait:g}s waiting for the lock {path}; another accel process "
            "holds it (raise store.lock_timeout to wait longer)"
        ) from None
    except OSError as exc:  # `locks` a file, read-only, full (after Timeout: an OSError too)
        raise storage_error(exc, "take the lock", path) from None
    try:
        yield
    finally:
        lock.release()
