"""Reading a checkpoint of a series a live run may be saving into, retention and all.

``accel checkpoints export``, ``show`` and ``verify`` hold the series' readers lock
(``locks/readers-<series>.lock``, shared) while they read: retention
(``checkpoints.keep_last``) removes nothing of a series while a reader holds it; what
it owes is paid at the run's next save, or as the last reader lets go of a series no
live run holds (:mod:`accel.store.lease`). Where that lock cannot be taken (a
read-only workspace), or a checkpoint goes anyway (``accel clean``, ``checkpoints rm``),
a checkpoint that disappears mid-read is never called damaged: the newest is read
instead when no step was named, else one line says it was removed while being read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

from accel import _locks
from accel.admin.catalog import find_checkpoint, series_views
from accel.errors import AccelError, UsageError
from accel.layout import series_readers_lock
from accel.store.lease import catch_up_retention, retention_owed
from accel.store.series import Found

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["gone", "read_checkpoint", "reading", "removed"]

T = TypeVar("T")
_TRIES = 5  # the newest again, at most this often (only without the readers lock)


@contextlib.contextmanager
def reading(ws: Workspace, series: str | None) -> Iterator[None]:
    """Hold the readers lock of ``series`` (None: of every series) for the block, then
    pay the retention readers held back, where no live run holds the series (not with
    an invalid config, which a reader goes on with: it changes nothing)."""
    with contextlib.ExitStack() as stack:
        for name in series_views(ws, series):  # none when there is no workspace
            lock = series_readers_lock(ws.path, name)
            stack.enter_context(_locks.shared(lock, ws.lock_timeout))
        yield
    if retention_owed(ws.layout) and ws.salvage_config() is None:
        catch_up_retention(ws.layout)


def removed(found: Found) -> str:
    m = found.manifest
    return (
        f"checkpoint {m.series}/step {m.step} was removed while being read (by retention, "
        "keep_last, or accel clean / checkpoints rm); choose another step "
        "(see `accel checkpoints list`)"
    )


def gone(found: Found) -> bool:
    """True when the checkpoint's folder is no longer there (renamed away to be deleted)."""
    return not os.path.isdir(found.path)


def read_checkpoint(
    ws: Workspace, step: int | None, series: str | None, read: Callable[[Found], T]
) -> T:
    """``read(found)`` of the checkpoint ``step`` names (None: the newest) under the
    readers lock; a checkpoint removed mid-read is never reported damaged."""
    with reading(ws, series):
        for _ in range(_TRIES):
            found = find_checkpoint(ws, step, series)
            try:
                return read(found)
            except (AccelError, OSError):
                if not gone(found):
                    raise
                if step is not None:
                    raise UsageError(removed(found)) from None
        raise UsageError(removed(found))
