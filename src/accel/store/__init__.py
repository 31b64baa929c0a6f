"""The locked, crash-safe state of a workspace: key-value store, cache, checkpoints.

Reach them through a :class:`~accel.Workspace`: ``ws.store``, ``ws.cache`` and
``ws.checkpoints``. Importing this package imports nothing else: ``accel clean`` and
``accel status`` read the on-disk formats (:mod:`accel.store.manifest`,
:mod:`accel.store.entry`) without loading the store; torch only for tensor I/O.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "Cache": "cache",
    "CacheEntryInfo": "cache",
    "CheckpointInfo": "checkpoints",
    "Checkpoints": "checkpoints",
    "Store": "kv",
    "LeaseHolder": "lease",
    "SeriesLease": "lease",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'accel.store' has no attribute {name!r}")
    return getattr(importlib.import_module(f"accel.store.{home}"), name)
