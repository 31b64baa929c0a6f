"""File locks: the one lock primitive and the one liveness probe of accel.

Every lock is an exclusive ``flock`` on a file of its own (``locks/<name>.lock``, named
by :mod:`accel.layout`). Lock files are never deleted: unlinking one would split its
waiters across two inodes. The kernel drops a flock when its holder dies, even by
SIGKILL, so "is somebody holding it" is the one liveness test of a run or a series
lease: :func:`held`. Every acquire is bounded (:func:`locked` raises
:class:`~accel.errors.LockTimeout`). Descriptors are close-on-exec, so a worker started
under a lock never inherits it.

A flock belongs to an open file description: two acquires of one file by one process
conflict like two processes' do (:mod:`accel.store.lease` keeps a table for that).

Ground floor: imports nothing of accel but :mod:`accel.errors`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from accel.errors import LockTimeout, storage_error

__all__ = ["DEFAULT_TIMEOUT", "acquire", "held", "locked", "release", "shared", "try_hold"]

DEFAULT_TIMEOUT = 60.0
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def acquire(path: Path, timeout: float, *, poll_interval: float = 0.05) -> int:
    """The descriptor holding the exclusive lock at ``path`` (created on demand);
    :class:`LockTimeout` naming it after ``timeout`` seconds. :func:`release` it.

    ``poll_interval``: how often a waiter retries. Hot locks held for a millisecond
    (the store's) poll faster, or waiters sleep while the lock sits free.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open(path, create=True)
    except OSError as exc:  # `locks` a file, read-only, full
        raise storage_error(exc, "take the lock", path) from None
    deadline = time.monotonic() + timeout
    try:
        while not _try_flock(fd, fcntl.LOCK_EX):
            if time.monotonic() >= deadline:
                raise LockTimeout(
                    f"timed out after {timeout:g}s waiting for the lock {path}; another accel "
                    "process holds it (raise store.lock_timeout to wait longer)"
                )
            time.sleep(poll_interval)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    """Let go of a lock :func:`acquire` took (closing the descriptor drops the flock)."""
    os.close(fd)


@contextlib.contextmanager
def locked(
    path: Path, timeout: float = DEFAULT_TIMEOUT, *, poll_interval: float = 0.05
) -> Iterator[None]:
    """Hold the lock at ``path`` for the block; see :func:`acquire`."""
    fd = acquire(path, timeout, poll_interval=poll_interval)
    try:
        yield
    finally:
        release(fd)


@contextlib.contextmanager
def shared(path: Path, timeout: float = DEFAULT_TIMEOUT) -> Iterator[bool]:
    """Hold the lock at ``path`` shared for the block (many readers at once, never with
    an exclusive holder); waits up to ``timeout``, then :class:`LockTimeout`. Yields
    False, holding nothing, when the lock file cannot be made (a read-only workspace).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open(path, create=True)
    except OSError:
        yield False
        return
    try:
        deadline = time.monotonic() + timeout
        while not _try_flock(fd, fcntl.LOCK_SH):
            if time.monotonic() >= deadline:
                raise LockTimeout(f"timed out after {timeout:g}s waiting for the lock {path}")
            time.sleep(0.01)
        yield True
    finally:
        os.close(fd)


def held(path: Path) -> bool:
    """True while some process holds the lock at ``path`` (a missing file is free).

    Never creates the file, never follows a link, never waits. The probe is a shared
    flock: it fails against an exclusive holder but not against another probe, so two
    readers looking at once never mistake each other for the holder.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return not _try_flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


def held_names(folder: Path, prefix: str, suffix: str) -> frozenset[str]:
    """Names ``X`` of every ``<prefix>X<suffix>`` lock in ``folder`` held now (:func:`held`
    each); an unreadable folder holds none. The one scan of ``locks/``: live runs
    (``run-``) and series in use (``series-``) are both found by it."""
    names: set[str] = set()
    try:
        with os.scandir(folder) as it:
            for entry in it:
                name = entry.name
                wanted = name.startswith(prefix) and name.endswith(suffix)
                if wanted and len(name) > len(prefix) + len(suffix) and held(Path(entry.path)):
                    names.add(name[len(prefix) : -len(suffix)])
    except OSError:
        pass
    return frozenset(names)


@contextlib.contextmanager
def try_hold(path: Path, *, create: bool) -> Iterator[bool]:
    """Hold the lock at ``path`` without waiting; yields False when someone else has it.

    A missing lock file (and ``create`` false) yields True: nobody can be holding it.
    An unopenable one yields False: it cannot be proved free.
    """
    try:
        fd = _open(path, create=create)
    except FileNotFoundError:
        yield True
        return
    except OSError:
        yield False
        return
    try:
        yield _try_flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def _open(path: Path, *, create: bool) -> int:
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    return os.open(path, flags, 0o666)


def _try_flock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _BUSY:
            return False
        raise
    return True
