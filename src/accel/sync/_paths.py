"""Remote paths (``rel``) and where they live in a workspace; pure apart from ``ws`` paths.

The remote mirrors the workspace's data layout::

    config/accelerate_config.yaml
    checkpoints/<series>/step-<step>/...     one unit per checkpoint
    logs/runs/<run-id>/...                   one unit per run
    cache/...                                one unit per entry folder (opt-in)

A path read from a remote index is untrusted: :func:`split` refuses anything that could
land outside those folders (``..``, an absolute path, a backslash); which names a pull
brings in is :mod:`accel.sync._trust`'s to say. Nor is a folder on the way to a path
trusted: :func:`accel._fs.link_below` finds the link a write would go through, and
:func:`accel._fs.make_below` makes folders without going through one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from accel._fs import TMP_PREFIX
from accel.errors import IntegrityError
from accel.layout import (
    CACHE_DIR,
    CACHE_META,
    CHECKPOINTS_DIR,
    CONFIG_REL,
    ENTRY_SUFFIX,
    LOCK_SUFFIX,
    MANIFEST,
    RUN_RECORD,
    RUNS_REL,
    STEP_PREFIX,
)
from accel.sync._model import CACHE, CHECKPOINT, CONFIG, RUN

if TYPE_CHECKING:
    from accel.workspace import Workspace

MARKERS = {MANIFEST: 0, CACHE_META: 0, RUN_RECORD: 0}  # written last, removed first
_DEBRIS = (TMP_PREFIX, ".tmp", ".accel-")


def is_debris(name: str) -> bool:
    """Temp files, lock files and hidden names: never synced."""
    return name.startswith(_DEBRIS) or name.startswith(".") or name.endswith(LOCK_SUFFIX)


def split(rel: str) -> list[str]:
    """The parts of a remote path, or :class:`IntegrityError` for an unsafe one: one that
    could name a place out of the folder it is joined to. A hidden or temp name is safe
    here (the pull refuses it by name and still brings the rest)."""
    parts = rel.split("/")
    bad = not rel or "\\" in rel or "\0" in rel or any(p in ("", ".", "..") for p in parts)
    if bad:
        raise IntegrityError(f"the remote index lists an unsafe path {rel!r}; refusing it")
    return parts


def is_checkpoint_file(parts: list[str]) -> bool:
    """A name a manifest may list (DCP's ``sharded/.metadata`` is hidden, not debris)."""
    from accel.store.manifest import FILE_NAME

    return parts[0] == CHECKPOINTS_DIR and FILE_NAME.fullmatch("/".join(parts[3:])) is not None


def kind_of(rel: str) -> str:
    parts = split(rel)
    if rel == CONFIG_REL:
        return CONFIG
    if parts[0] == CHECKPOINTS_DIR and len(parts) >= 4 and parts[2].startswith(STEP_PREFIX):
        return CHECKPOINT
    if parts[:2] == RUNS_REL.split("/") and len(parts) >= 4:
        return RUN
    if parts[0] == CACHE_DIR and len(parts) >= 2:
        return CACHE
    raise IntegrityError(f"the remote index lists {rel!r}, which is no part of a workspace")


def unit_of(rel: str) -> str:
    """The folder that moves as one: a checkpoint, a run, a cache entry; else the file."""
    parts, kind = split(rel), kind_of(rel)
    if kind in (CHECKPOINT, RUN):
        return "/".join(parts[:3])
    if kind == CACHE:
        for i, part in enumerate(parts[:-1]):
            if part.endswith(ENTRY_SUFFIX):
                return "/".join(parts[: i + 1])
    return rel


def local_path(ws: Workspace, rel: str) -> Path:
    """Where ``rel`` lives in ``ws`` (always inside the workspace's folders)."""
    parts, kind = split(rel), kind_of(rel)
    if kind == CONFIG:
        return ws.config_file
    if kind == CHECKPOINT:
        return ws.checkpoints_dir.joinpath(*parts[1:])
    if kind == RUN:
        return ws.runs_dir.joinpath(*parts[2:])
    return ws.cache_dir.joinpath(*parts[1:])


def order_key(rel: str) -> tuple[str, int, str]:
    """Sort key: by unit, commit markers after the data they commit."""
    name = rel.rsplit("/", 1)[-1]
    return (unit_of(rel), 1 if name in MARKERS else 0, rel)
