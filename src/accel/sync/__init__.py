"""Remote sync of a workspace through fsspec: ``accel sync push|pull URL``.

What moves: committed checkpoints (manifest present and valid), the records and logs of
finished runs, the config, and with ``include_cache`` the cache. Never live runs'
files, locks, temp debris, ``state.bin``.

The remote keeps an index, ``accel-sync.json``, of every file with its size and
checksum (for checkpoints, the checksums of their manifests), so a push moves only
what changed and resumes after an interruption, and a pull verifies every file before
it becomes visible.

>>> from accel import Workspace
>>> from accel.sync import open_remote, push
>>> remote = open_remote("s3://bucket/project", {}, os.environ)   # doctest: +SKIP
>>> push(Workspace.discover(), remote).files                        # doctest: +SKIP
"""

from __future__ import annotations

from accel._redact import redact_url
from accel.sync._model import NullReporter, Reporter, Skipped, SyncPlan, SyncResult, Transfer
from accel.sync._remote import (
    INDEX_NAME,
    Remote,
    open_remote,
    parse_storage_options,
)
from accel.sync._run import pull, push

__all__ = [
    "INDEX_NAME",
    "NullReporter",
    "Remote",
    "Reporter",
    "Skipped",
    "SyncPlan",
    "SyncResult",
    "Transfer",
    "open_remote",
    "parse_storage_options",
    "pull",
    "push",
    "redact_url",
]
