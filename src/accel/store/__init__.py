"""The locked, crash-safe state of a workspace: key-value store, cache, checkpoints.

Reach them through a :class:`~accel.Workspace`: ``ws.store``, ``ws.cache`` and
``ws.checkpoints``. Importing this package never imports torch; only tensor I/O does.
"""

from __future__ import annotations

from accel.store.cache import Cache, CacheEntryInfo
from accel.store.checkpoints import CheckpointInfo, Checkpoints
from accel.store.kv import Store
from accel.store.lease import LeaseHolder, SeriesLease

__all__ = [
    "Cache",
    "CacheEntryInfo",
    "CheckpointInfo",
    "Checkpoints",
    "LeaseHolder",
    "SeriesLease",
    "Store",
]
