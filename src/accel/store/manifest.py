"""The checkpoint manifest: its one reader and its one writer.

``manifest.json`` is written last into a checkpoint's folder and makes it a checkpoint::

    {"format": 1, "series": "default", "step": 1200, "created": 1764428559.1,
     "tag": null, "run_id": "20261129-150240-3fa2c1", "world_size": 2,
     "files": {"state.tensors": {"size": 123, "checksum": "xxh3_64:..."}, ...}}

A checkpoint is exactly what :func:`read_manifest` accepts; the store, clean, sync,
status and env all ask it. A manifest that is not JSON, lacks a field, has a field of
the wrong type, lists a file that is not one of accel's (:data:`FILE_NAME`) or with a
checksum of another form than accel writes (``xxh3_64:<16 hex digits>``), records
another step than its folder's name or has a newer ``format`` is refused with
:class:`~accel.errors.IntegrityError` naming the problem: that folder is no checkpoint
(reported, never loaded, never deleted), and the rest of its series is unaffected.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._fs import read_json
from accel.errors import IntegrityError, ManifestMissing
from accel.layout import ASIDE_RE, MANIFEST, RANK_PREFIX, SHARDED_DIR, STAGE_RE, STEP_RE
from accel.store._records import (
    Invalid,
    digest_fields,
    is_int,
    optional_str,
    seconds,
    versioned_object,
)
from accel.store.hashing import WRITTEN, FileDigest, checksum_problem
from accel.store.sharded import METADATA

__all__ = [
    "FILE_NAME",
    "FORMAT",
    "MAX_STEP",
    "Manifest",
    "ManifestMissing",
    "parse_manifest",
    "read_manifest",
    "step_of",
    "write_manifest",
]

FORMAT = 1
MAX_STEP = 10**12 - 1
_MAX_BYTES = 64 << 20  # a manifest lists files: anything this large is not one
_N = "(?:0|[1-9][0-9]{0,8})"  # a rank or a file count, as accel and DCP write them
# The only files a checkpoint may hold (an allowlist; the names are free text in a
# pulled manifest): the replicated state, each rank's state, and what DCP writes into
# sharded/ (its metadata and one or more __<rank>_<n>.distcp per rank). A manifest
# listing anything else is no checkpoint: store, verify, clean and sync all refuse it.
TENSORS_SUFFIX = ".tensors"
STATE_TENSORS = "state.tensors"  # a step's state tree (layout.STATE_FILE: the kv store)
FILE_NAME = re.compile(
    "|".join(
        [
            re.escape(STATE_TENSORS),
            rf"{RANK_PREFIX}{_N}{re.escape(TENSORS_SUFFIX)}",  # rank-N.tensors
            rf"{SHARDED_DIR}/{re.escape(METADATA)}",
            rf"{SHARDED_DIR}/__{_N}_{_N}\.distcp",
        ]
    )
)


@dataclass(frozen=True)
class Manifest:
    series: str
    step: int
    created: float
    tag: str | None
    run_id: str | None
    world_size: int
    files: Mapping[str, FileDigest]

    @property
    def size(self) -> int:
        return sum(d.size for d in self.files.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "series": self.series,
            "step": self.step,
            "created": self.created,
            "tag": self.tag,
            "run_id": self.run_id,
            "world_size": self.world_size,
            "files": {name: d.to_json() for name, d in sorted(self.files.items())},
        }


def step_of(name: str) -> int | None:
    """The step a checkpoint folder name stands for (committed, being written or set
    aside during a re-save), None for any other name."""
    match = STEP_RE.fullmatch(name) or STAGE_RE.fullmatch(name) or ASIDE_RE.fullmatch(name)
    return int(match.group(1)) if match else None


def read_manifest(folder: Path, name: str | None = None) -> Manifest:
    """The manifest of the checkpoint folder ``folder``, validated; IntegrityError otherwise.

    ``name``: the folder name to check the manifest against, when ``folder`` is a staging
    folder that will be renamed to it (default: ``folder``'s own name). A missing manifest
    raises :class:`ManifestMissing`. Links are never followed.
    """
    step = step_of(name or folder.name)
    if step is None:
        raise IntegrityError(f"{folder} is not a checkpoint folder (step-<12 digits>)")
    path = folder / MANIFEST
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        raise IntegrityError(f"{folder} is not a folder of its own (a link or a file)")
    try:
        data = read_json(path, limit=_MAX_BYTES)  # a FIFO, a device, a deep nest: refused
    except FileNotFoundError:
        raise ManifestMissing(f"{folder} has no {MANIFEST}") from None
    return parse_manifest(data, str(path), step)


def parse_manifest(data: Any, where: str, step: int | None = None) -> Manifest:
    """A manifest from decoded JSON ``data`` (``where`` names it in errors).

    ``step``: the step its folder name says, which the manifest must record.
    """
    bad = Invalid("checkpoint manifest", where)
    data = versioned_object(data, FORMAT, bad, "manifest")
    found = data.get("step")
    if not is_int(found) or not 0 <= found <= MAX_STEP:
        raise bad(f"its step is {found!r}, not an integer from 0 to {MAX_STEP}")
    if step is not None and found != step:
        raise bad(f"it records step {found} but its folder is step {step}")
    series = data.get("series")
    if not isinstance(series, str):
        raise bad(f"'series' is {series!r}, not a string")
    return Manifest(
        series=series,
        step=found,
        created=seconds(data.get("created"), "created", bad),
        tag=optional_str(data, "tag", bad),
        run_id=optional_str(data, "run_id", bad),
        world_size=_world_size(data, bad),
        files=_files(data.get("files"), bad),
    )


def write_manifest(folder: Path, manifest: Manifest) -> None:
    """Write the manifest into ``folder`` (a staging folder nobody sees yet), durably.

    No temp file and rename of its own: renaming the folder commits it, whole.
    """
    text = json.dumps(manifest.to_json(), indent=2, sort_keys=True)
    with open(folder / MANIFEST, "x", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


# -- validation -----------------------------------------------------------------------------


def _world_size(data: dict[str, Any], bad: Invalid) -> int:
    value = data.get("world_size", 1)
    if not is_int(value) or value < 1:
        raise bad(f"'world_size' is {value!r}, not a positive integer")
    return value


def _files(files: Any, bad: Invalid) -> dict[str, FileDigest]:
    if not isinstance(files, dict):
        raise bad(f"'files' is {files!r}, not an object")
    out = {}
    for name, entry in files.items():
        problem = _name_problem(name)
        if problem:
            raise bad(f"it lists the file {name!r}, which {problem}")
        fields = digest_fields(entry)
        if fields is None:
            raise bad(f"the file {name!r} has no size and checksum")
        # Only the checksum form accel writes (xxh3_64:<16 hex>): load and verify hash
        # with it, and a sync index refuses what its rule does not accept, so another
        # form would be a checkpoint nothing can verify, pushed into an index every
        # later push and pull refuses.
        problem = checksum_problem(fields[1], WRITTEN)
        if problem is not None:
            raise bad(f"the file {name!r} has {problem}")
        out[name] = FileDigest(*fields)
    return out


def _name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a file of a checkpoint folder, or None."""
    if not isinstance(name, str) or not name:
        return "is not a file name"
    if FILE_NAME.fullmatch(name) is None:
        return (
            "is not a file accel writes (state.tensors, rank-N.tensors, "
            "sharded/.metadata, sharded/__N_M.distcp)"
        )
    return None
