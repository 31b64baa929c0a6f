"""A restarted worker loads the checkpoint the launcher just committed from memory.

When a worker fails, the launcher commits the newest step every rank holds whole in the
memory tier (:class:`accel.store.memtier.Persister`), then moves that step's slots to
``<tier>/restore/rank-N`` instead of deleting them. The new attempt's workers resume
from that checkpoint; :func:`load_file` maps its files from there, in shared memory,
instead of reading them back from the disk the launcher wrote them to a moment before.

The checkpoint on disk stays the authority: a file is taken from memory only when its
slot names that checkpoint's step and series and its size is the manifest's, and it is
verified against the manifest's checksum like a file on disk (that checksum was computed
from these very bytes as the launcher copied them). Anything else (no tier, another
step, a file that fails its checksum) loads from the disk, as before. Once every rank
has read (``load_state()``'s agreement), rank 0 removes ``restore/`` (:func:`release`): the
new attempt's snapshots get the shared memory it held; what the ranks mapped stays
theirs until they let go of it.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

from accel._fs import remove_tree
from accel.errors import AccelError
from accel.layout import rank_name
from accel.store.manifest import STATE_TENSORS, TENSORS_SUFFIX
from accel.store.series import Found
from accel.store.tensorfile import load_tensor_file

_RANK_FILE = re.compile(rf"rank-(0|[1-9][0-9]{{0,8}}){re.escape(TENSORS_SUFFIX)}")


def load_file(found: Found, name: str, map_location: Any = "cpu") -> Any:
    """The tree of ``name`` in checkpoint ``found`` (which lists it), from the memory tier
    when it holds that checkpoint's bytes, else from the disk; verified either way."""
    digest = found.manifest.files[name]
    copy = tier_copy(found, name)
    if copy is not None:
        try:
            return load_tensor_file(copy, digest, map_location)
        except (AccelError, OSError):
            pass  # only ever a faster way to the same bytes: the disk has them
    return load_tensor_file(found.path / name, digest, map_location)


def tier_copy(found: Found, name: str) -> Path | None:
    """Where the memory tier holds ``name`` of ``found`` (None: it does not)."""
    from accel.store.memtier import DIR_ENV, RESTORE, read_slot

    tier = os.environ.get(DIR_ENV)
    match = _RANK_FILE.fullmatch(name)
    rank = 0 if name == STATE_TENSORS else int(match.group(1)) if match else None
    if not tier or rank is None:
        return None
    folder = Path(tier) / RESTORE / rank_name(rank)
    slot = read_slot(folder, rank)
    digest = found.manifest.files.get(name)
    if slot is None or digest is None or name not in slot.files:
        return None
    if (slot.step, slot.series) != (found.manifest.step, found.manifest.series):
        return None
    return folder / name if slot.files[name]["size"] == digest.size else None


def release() -> None:
    """Remove the tier's ``restore/`` (a restarted rank 0, once every rank has read)."""
    from accel.store.memtier import DIR_ENV, RESTORE

    tier = os.environ.get(DIR_ENV)
    if tier:
        with contextlib.suppress(OSError):
            remove_tree(Path(tier) / RESTORE)
