"""Files accel did not make inside the folders it removes (a note in a step folder, an
``analysis.ipynb`` in a run folder, a README in a cache entry): never deleted with them.

Each folder kind has one allowlist of its own files, kept by the owner of its format: a
checkpoint's manifest (:func:`accel.store.series.foreign_in`), a cache entry's
(:func:`accel.store.entry.entry_file`), a run folder's (:data:`accel.layout.RUN_FILE_RE`).
A plan names what else it found (:func:`annotate`); a removal re-checks at the moment it
removes (:func:`strip`): without ``force`` accel's files go (the proofs first, so from
the first unlink the folder is no item and no provable debris) and the folder stays with
the rest; with ``force`` the folder goes whole.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from accel import layout
from accel.clean._items import Item
from accel.clean._plan import CleanPlan, PlanItem
from accel.errors import IntegrityError
from accel.store import entry as entry_mod

__all__ = ["annotate", "describe_foreign", "foreign_of", "kept_reason", "strip"]


def foreign_of(item: Item) -> tuple[str, ...]:
    """What accel did not make inside ``item``'s folder (reads only)."""
    path = item.path
    if item.kind == "checkpoint":
        # Here: the checkpoint format's modules are a tenth of a clean's start-up, and a
        # plan of cache entries and runs never needs them.
        from accel.store import series as series_mod
        from accel.store.manifest import read_manifest

        try:
            found = series_mod.Found(path, read_manifest(path))
        except (OSError, IntegrityError):  # gone or damaged since the scan: execution re-checks
            return ()
        return tuple(series_mod.foreign_in(found))
    if item.kind == "entry":
        payload = item.payload  # what the scan read in its meta.json: not read again
        if payload is None:
            try:
                payload = entry_mod.read_cache_meta(path, item.name).payload
            except (OSError, IntegrityError):
                payload = None
        return tuple(entry_mod.foreign_in_entry(path, payload))
    if item.kind == "run":
        return tuple(layout.foreign_files(path, layout.run_file))
    return ()


def annotate(plan: CleanPlan) -> CleanPlan:
    """``plan`` with each planned item's foreign files named (``Item.foreign``)."""
    items = []
    for planned in plan.items:
        item = planned.item
        if item.kind == "entry" and entry_mod.holds_only_own(item.location, item.payload):
            foreign: tuple[str, ...] = ()  # most entries: a listing, no link followed
        else:
            foreign = foreign_of(item) if not os.path.islink(item.location) else ()
        items.append(PlanItem(item._replace(foreign=foreign) if foreign else item, planned.reason))
    return dataclasses.replace(plan, items=tuple(items))


def strip(cache_root: Path, item: Item) -> list[str]:
    """For a cache entry or a run folder holding files accel did not make: remove accel's
    files and keep the folder with those; their names ([] when there are none)."""
    if item.kind == "entry":
        return entry_mod.strip_entry(item.path, cache_root, item.name)
    if item.kind == "run":
        foreign = layout.foreign_files(item.path, layout.run_file)
        if foreign:
            proofs = (layout.OWNER_MARKER, layout.RUN_RECORD)
            layout.remove_own(item.path, layout.run_file, proofs)
        return foreign
    return []


def describe_foreign(names: Sequence[str]) -> str:
    """``N file(s) accel did not make (a, b, ...)``: the words every plan and result use."""
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{len(names)} file(s) accel did not make ({shown})"


def kept_reason(names: Sequence[str]) -> str:
    return (
        f"kept the folder for {describe_foreign(names)}; accel's files are removed "
        "(--force removes those too)"
    )
