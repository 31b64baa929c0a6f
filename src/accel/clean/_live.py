"""Which runs and checkpoint series are in use right now, from their locks.

A run is live while its launcher holds ``locks/run-<id>.lock``; a series is in use
while someone holds ``locks/series-<name>.lock`` or the run that saved into it last
is live (:mod:`accel.store.lease`). The kernel drops a flock when its
holder dies (even by SIGKILL), so a record still saying ``running`` cannot fool us.
The probe itself is :func:`accel._locks.held`.
"""

from __future__ import annotations

from pathlib import Path

from accel import _locks
from accel.layout import LOCK_SUFFIX
from accel.layout import SERIES_LOCK_PREFIX as SERIES_PREFIX

__all__ = ["held_names", "held_series"]


def held_names(locks_dir: Path, prefix: str) -> frozenset[str]:
    """Names ``X`` of every ``<prefix>X.lock`` in ``locks_dir`` that is held now."""
    return _locks.held_names(locks_dir, prefix, LOCK_SUFFIX)


def held_series(locks_dir: Path) -> frozenset[str]:
    """Series a live process holds, and those of live runs whose rank 0 is restarting."""
    from accel.store.lease import claimed_by_live_runs

    return held_names(locks_dir, SERIES_PREFIX) | claimed_by_live_runs(locks_dir)
