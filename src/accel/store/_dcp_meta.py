"""DCP's ``sharded/.metadata``, read once and checked before DCP may use it.

DCP's own reader opens ``.metadata`` and unpickles it with ``pickle.load``; checking the
file and then letting DCP reopen it leaves a window in which the file can be swapped
for a pickle that runs code. So accel reads the bytes once (never through a link, never
blocking on a FIFO, only a regular file of the size the manifest records), checks them
against the manifest's checksum, unpickles them with an unpickler that only knows DCP's
metadata classes, and checks the object: that object, and no file, is what DCP gets
(:class:`accel.store._sharded` hands it over from its reader's ``read_metadata``).

What the object may say (an allowlist; anything else is refused as damaged):

- every storage entry names a plain file of ``sharded/`` that the manifest lists (no
  ``/``, no ``..``, not ``.metadata``), with an offset and a length that are
  non-negative integers inside that file's recorded size, and no transforms (accel
  never writes any);
- every tensor has a shape of at most 64 non-negative dimensions whose bytes fit in
  the sharded files, and chunks inside that shape; its dtype is a torch dtype;
- the names and the planner's paths are strings (and list indices).
"""

from __future__ import annotations

import importlib
import io
import math
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

from accel._fs import open_regular
from accel.errors import DamagedFile, IntegrityError
from accel.layout import SHARDED_DIR
from accel.store._hashing import FileDigest, digest_bytes

__all__ = ["FOLDER", "METADATA", "open_verified", "read_metadata"]

FOLDER = SHARDED_DIR
METADATA = ".metadata"
_MAX_DIMS = 64

_METADATA_CLASSES_FROM = ("torch.distributed.checkpoint.metadata",)
_ALSO_ALLOWED = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),
    ("torch", "Size"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        import torch

        if (module, name) in _ALSO_ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(
            getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)
        ):
            return getattr(torch, name)
        if module in _METADATA_CLASSES_FROM:
            obj = getattr(importlib.import_module(module), name, None)
            if isinstance(obj, type) and obj.__module__ == module:
                return obj
        raise pickle.UnpicklingError(f"{module}.{name} is not part of DCP metadata")


def read_metadata(folder: Path, files: Mapping[str, FileDigest]) -> Any:
    """The checked DCP ``Metadata`` of ``folder`` (a checkpoint's ``sharded/``), read
    once; IntegrityError naming the file for anything else."""
    path = folder / METADATA
    digest = files.get(f"{FOLDER}/{METADATA}")
    if digest is None:
        raise IntegrityError(f"{path} is not in the manifest: the checkpoint is damaged; delete it")
    data = _read_verified(path, digest)
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any failure means: do not unpickle it
        raise IntegrityError(
            f"{path} was refused: it is not plain DCP metadata ({exc}); delete the checkpoint"
        ) from None
    problem = _problem(metadata, files)
    if problem is not None:
        raise IntegrityError(f"{path} is damaged: {problem}; delete the checkpoint")
    return metadata


def open_verified(path: Path, digest: FileDigest) -> BinaryIO:
    """``path`` opened for reading as the manifest's ``digest`` describes it: never
    through a link, never blocking (a FIFO), only a regular file of the recorded size;
    IntegrityError otherwise. (Its content is the caller's to check.)"""
    try:
        fd = open_regular(path, size=digest.size)
    except DamagedFile as exc:
        raise IntegrityError(f"{path} {exc.why}: it is damaged; delete the checkpoint") from None
    except OSError as exc:
        raise IntegrityError(
            f"{path} cannot be read ({exc.strerror}); delete the checkpoint"
        ) from None
    return os.fdopen(fd, "rb")


def _read_verified(path: Path, digest: FileDigest) -> bytes:
    with open_verified(path, digest) as fh:
        data = fh.read(digest.size + 1)
    if len(data) != digest.size or digest_bytes(data) != digest.checksum:
        raise IntegrityError(f"{path} fails its checksum; it is corrupt: delete the checkpoint")
    return data


# -- the object -------------------------------------------------------------------------------


def _problem(metadata: Any, files: Mapping[str, FileDigest]) -> str | None:
    """What is wrong with ``metadata``, or None: every field is checked for its type."""
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    if type(metadata) is not Metadata:
        return f"it holds a {type(metadata).__name__}, not DCP metadata"
    entries = getattr(metadata, "state_dict_metadata", None)
    if type(entries) is not dict:
        return "it lists no entries"
    budget = sum(d.size for name, d in files.items() if name.startswith(f"{FOLDER}/"))
    for fqn, entry in entries.items():
        if type(fqn) is not str:
            return "an entry's name is not a string"
        problem = _entry_problem(entry, budget)
        if problem is not None:
            return f"entry {fqn!r}: {problem}"
    problem = _storage_problem(getattr(metadata, "storage_data", None), entries, files)
    if problem is None:
        problem = _paths_problem(getattr(metadata, "planner_data", None))
    storage_meta = getattr(metadata, "storage_meta", None)
    if problem is None and storage_meta is not None and type(storage_meta) is not StorageMeta:
        problem = "its storage_meta is not DCP's"
    return problem


def _entry_problem(entry: Any, budget: int) -> str | None:
    import torch
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        TensorProperties,
        TensorStorageMetadata,
    )

    if type(entry) is BytesStorageMetadata:
        return None
    if type(entry) is not TensorStorageMetadata:
        return f"a {type(entry).__name__} is not a DCP entry"
    properties = getattr(entry, "properties", None)
    dtype = getattr(properties, "dtype", None)
    if type(properties) is not TensorProperties or not isinstance(dtype, torch.dtype):
        return "its tensor properties are not DCP's"
    shape = getattr(entry, "size", None)
    if not _is_shape(shape) or len(shape) > _MAX_DIMS:
        return f"its shape is not {_MAX_DIMS} dimensions or fewer of non-negative integers"
    if math.prod(shape) * dtype.itemsize > budget:
        return f"its shape {list(shape)} holds more than the sharded files do ({budget} bytes)"
    chunks = getattr(entry, "chunks", None)
    if type(chunks) is not list:
        return "it has no list of chunks"
    for chunk in chunks:
        offsets, sizes = getattr(chunk, "offsets", None), getattr(chunk, "sizes", None)
        if (
            type(chunk) is not ChunkStorageMetadata
            or not (_is_shape(offsets) and _is_shape(sizes))
            or not len(offsets) == len(sizes) == len(shape)
            or any(o + s > d for o, s, d in zip(offsets, sizes, shape, strict=True))
        ):
            return "a chunk lies outside the tensor"
    return None


def _is_shape(value: Any) -> TypeGuard[tuple[int, ...]]:
    return isinstance(value, tuple) and all(type(d) is int and d >= 0 for d in value)


def _storage_problem(
    storage: Any, entries: dict[str, Any], files: Mapping[str, FileDigest]
) -> str | None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import MetadataIndex

    if type(storage) is not dict:
        return "it has no storage entries"
    for index, info in storage.items():
        fqn = getattr(index, "fqn", None)
        if type(index) is not MetadataIndex or type(fqn) is not str or fqn not in entries:
            return "a storage entry is not for one of its entries"
        if type(info) is not _StorageInfo:
            return f"the storage of {index.fqn!r} is not DCP's"
        name = getattr(info, "relative_path", None)
        digest = files.get(f"{FOLDER}/{name}") if _is_plain_name(name) else None
        if digest is None:
            return f"{index.fqn!r} is stored in {name!r}, not a file of {FOLDER}/ in the manifest"
        offset, length = getattr(info, "offset", None), getattr(info, "length", None)
        if not (type(offset) is int and type(length) is int and offset >= 0 and length >= 0):
            return f"{index.fqn!r} has an offset or a length that is not a non-negative integer"
        if offset + length > digest.size:
            return f"{index.fqn!r} lies outside {name} ({offset}+{length} > {digest.size} bytes)"
        if getattr(info, "transform_descriptors", None):
            return f"{index.fqn!r} is stored with transforms, which accel never writes"
    return None


def _is_plain_name(name: Any) -> bool:
    return (
        type(name) is str
        and name not in ("", ".", "..", METADATA)
        and not any(c in name for c in "/\\\0")
    )


def _paths_problem(paths: Any) -> str | None:
    if paths is None:
        return None
    if type(paths) is not dict:
        return "its planner data is not a table of paths"
    for fqn, path in paths.items():
        if (
            type(fqn) is not str
            or type(path) not in (tuple, list)
            or not all(type(p) in (str, int) for p in path)
        ):
            return "its planner data names a path that is not strings and indices"
    return None
