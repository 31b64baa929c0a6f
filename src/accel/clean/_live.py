"""Which runs and checkpoint series are in use right now, from their locks.

A run is live while its launcher holds ``locks/run-<id>.lock``; a series is in use
while someone holds ``locks/series-<name>.lock``. The kernel drops a flock when its
holder dies (even by SIGKILL), so a record still saying ``running`` cannot fool us.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from accel.layout import LOCK_SUFFIX
from accel.layout import SERIES_LOCK_PREFIX as SERIES_PREFIX


def lock_held(path: Path) -> bool:
    """True when another process holds the flock on ``path`` (a missing file is free)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        # A shared probe fails against an exclusive holder but not against other probes.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
    finally:
        os.close(fd)
    return False


def held_names(locks_dir: Path, prefix: str) -> frozenset[str]:
    """Names ``X`` of every ``<prefix>X.lock`` in ``locks_dir`` that is held now."""
    names: set[str] = set()
    try:
        with os.scandir(locks_dir) as it:
            for entry in it:
                name = entry.name
                wanted = name.startswith(prefix) and name.endswith(LOCK_SUFFIX)
                if wanted and lock_held(Path(entry.path)):
                    names.add(name[len(prefix) : -len(LOCK_SUFFIX)])
    except OSError:
        pass
    return frozenset(names)


def held_series(locks_dir: Path) -> frozenset[str]:
    return held_names(locks_dir, SERIES_PREFIX)


@contextlib.contextmanager
def try_hold(path: Path, *, create: bool) -> Iterator[bool]:
    """Hold the flock on ``path`` without waiting; yields False when someone else has it.

    A missing lock file (and ``create`` false) yields True: nobody can be holding it.
    """
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o666)
    except FileNotFoundError:
        yield True
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the descriptor releases the flock
