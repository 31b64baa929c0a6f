"""The commit protocol of one checkpoint folder, in the order a kill must find it.

Every file is written under the ``.tmp-<step>-<id>/`` folder and hashed while it is
written (:func:`write_files`); then ``manifest.json`` goes in last, the folder is
fsynced and renamed to ``step-<step>`` (or swapped with the old copy of the step), and
the series folder is fsynced (:func:`commit`). A kill before the rename leaves an
invisible temp folder; after it, a whole checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from accel._fs import fsync_dir
from accel.errors import write_failed
from accel.layout import rank_name
from accel.store import _sharded
from accel.store import series as series_mod
from accel.store._checkpoint_info import STATE_FILE
from accel.store._trace import phase
from accel.store.collectives import DistContext
from accel.store.manifest import Manifest, write_manifest
from accel.store.series import Reaper, step_dir_name
from accel.store.tensorfile import FileDigest, save_tensor_file

__all__ = ["commit", "new_manifest", "write_files"]


def write_files(
    tmp: Path, state: Any, rank_state: Any, ctx: DistContext, sharded: Any
) -> dict[str, Any]:
    """This rank's files of the checkpoint, written into ``tmp``: ``{name: digest}``."""
    files = {}
    if sharded is not None:  # first: a collective that every rank must reach
        files.update(_sharded.save(sharded, tmp / _sharded.FOLDER, ctx))
    if ctx.rank == 0:
        files[STATE_FILE] = save_tensor_file(state, tmp / STATE_FILE).to_json()
    if rank_state is not None:
        name = rank_name(ctx.rank, ".tensors")
        files[name] = save_tensor_file(rank_state, tmp / name).to_json()
    return files


def new_manifest(
    series: str, step: int, tag: str | None, files: dict[str, Any], world_size: int
) -> Manifest:
    return Manifest(
        series=series,
        step=step,
        created=time.time(),
        tag=tag,
        run_id=os.environ.get("ACCEL_RUN_ID"),
        world_size=world_size,
        files={n: FileDigest(int(f["size"]), str(f["checksum"])) for n, f in files.items()},
    )


def commit(tmp: Path, manifest: Manifest, reaper: Reaper) -> Path:
    """Rank 0: the manifest last, then rename ``tmp`` into place (or swap); the folder."""
    target = tmp.parent / step_dir_name(manifest.step)
    try:
        with phase("manifest"):
            write_manifest(tmp, manifest)
        with phase("fsync-dir"):
            fsync_dir(tmp)
        with phase("rename"):
            if os.path.lexists(target):
                series_mod.swap_in(tmp, target, reaper)
            else:
                os.rename(tmp, target)
                fsync_dir(tmp.parent)
    except OSError as exc:
        raise write_failed(target, exc) from exc
    return target
