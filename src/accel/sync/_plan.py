"""The sync planners: pure functions from what is here and what is there to transfers.

Tested without a filesystem. Push moves every file the remote index lacks or records
with another checksum. Pull moves every file the workspace lacks; a file or checkpoint
that exists here with other content is kept and reported, never overwritten.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from accel.layout import ENTRY_SUFFIX
from accel.sync._model import (
    CACHE,
    CHECKPOINT,
    CONFIG,
    PULL,
    PUSH,
    RUN,
    FileEntry,
    LocalFile,
    Skipped,
    SyncPlan,
    Transfer,
)
from accel.sync._paths import kind_of, order_key, unit_of


def needs_checksum(local: Iterable[LocalFile], remote: Mapping[str, FileEntry]) -> list[str]:
    """Files whose checksum decides whether they move: same size here and there."""
    out = []
    for f in local:
        entry = remote.get(f.rel)
        if f.checksum is None and entry is not None and entry.size == f.size:
            out.append(f.rel)
    return out


def plan_push(
    local: Iterable[LocalFile],
    remote: Mapping[str, FileEntry],
    skipped: Iterable[Skipped] = (),
) -> SyncPlan:
    transfers, unchanged = [], 0
    for f in local:
        entry = remote.get(f.rel)
        if entry is not None and entry == FileEntry(f.size, f.checksum or ""):
            unchanged += 1
            continue
        reason = "new" if entry is None else "changed"
        transfers.append(Transfer(f.rel, f.path, f.size, f.checksum, f.unit, f.kind, reason))
    transfers.sort(key=lambda t: order_key(t.rel))
    return SyncPlan(PUSH, tuple(transfers), tuple(skipped), unchanged)


@dataclass(frozen=True)
class LocalView:
    """What the workspace holds for the remote's paths (gathered by the IO edge).

    ``files``: rel -> entry for the files present (checksum "" when not hashed because
    the sizes differ); ``units``: the checkpoint and cache-entry folders present;
    ``live_runs``: ids of runs live here now.
    """

    files: Mapping[str, FileEntry]
    units: Collection[str] = ()
    live_runs: Collection[str] = ()


def plan_pull(
    remote: Mapping[str, FileEntry],
    here: LocalView,
    include_cache: bool,
    paths: Mapping[str, str] | None = None,
) -> SyncPlan:
    """``paths`` maps rel -> local path text (for the plan's display only)."""
    from pathlib import Path

    groups: dict[str, list[str]] = {}
    for rel in sorted(remote, key=order_key):
        if include_cache or kind_of(rel) != CACHE:
            groups.setdefault(unit_of(rel), []).append(rel)
    transfers: list[Transfer] = []
    skipped: list[Skipped] = []
    unchanged = 0
    for unit, rels in groups.items():
        kind = kind_of(rels[0])
        moving, reason = _pull_unit(unit, kind, rels, remote, here)
        if reason:  # a remote checkpoint not pulled is a checkpoint this pull lacks: exit 1
            skipped.append(Skipped(unit, reason, blocking=kind == CHECKPOINT))
        unchanged += sum(1 for rel in rels if here.files.get(rel) == remote[rel])
        for rel in moving:
            e = remote[rel]
            local = Path((paths or {}).get(rel, rel))
            transfers.append(Transfer(rel, local, e.size, e.checksum, unit, kind, "new"))
    return SyncPlan(PULL, tuple(transfers), tuple(skipped), unchanged)


def _pull_unit(
    unit: str,
    kind: str,
    rels: list[str],
    remote: Mapping[str, FileEntry],
    here: LocalView,
) -> tuple[list[str], str | None]:
    """(files to download, reason the unit is skipped or None)."""
    if kind == CONFIG:  # goes aside, never over the local file: no conflict to keep
        return [r for r in rels if here.files.get(r) != remote[r]], None
    if kind == RUN and unit.rsplit("/", 1)[-1] in here.live_runs:
        return [], "live run here"
    folder_unit = kind == CHECKPOINT or (kind == CACHE and unit.endswith(ENTRY_SUFFIX))
    if folder_unit and unit in here.units:
        same = all(here.files.get(rel) == remote[rel] for rel in rels)
        return [], None if same else "exists here with other content (kept)"
    if folder_unit:
        return rels, None
    moving, conflicts = [], []
    for rel in rels:
        mine = here.files.get(rel)
        if mine is None:
            moving.append(rel)
        elif mine != remote[rel]:
            conflicts.append(rel.rsplit("/", 1)[-1])
    reason = f"{', '.join(conflicts)} differ here (kept)" if conflicts else None
    return moving, reason
