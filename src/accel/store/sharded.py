"""Sharded state (FSDP / DTensor) through ``torch.distributed.checkpoint``, made safe.

DCP writes one ``__<rank>_<n>.distcp`` file per rank and a ``.metadata`` file; accel
puts them in the checkpoint's ``sharded/`` folder, hashes them like its own files and
lists them in the manifest. On load, the ranks share the verification of every file
before DCP reads any of them.

DCP itself unpickles ``.metadata`` with ``pickle.load`` and non-tensor values with
``torch.load(weights_only=False)``. accel never lets it: the metadata is read once and
checked (:func:`read_metadata`, below), and DCP's reader is handed that checked object
(it never opens ``.metadata``); the values are checked with ``weights_only=True``
before DCP unpickles them. The shard files DCP opens after the verification are opened
only as the manifest lists them (no link, no FIFO, the recorded size). Every failure
inside DCP (its ``CheckpointException`` is a ``BaseException``) comes out as one
:class:`IntegrityError` line.

**The metadata.** DCP's own reader opens ``.metadata`` and unpickles it with
``pickle.load``; checking the file and then letting DCP reopen it leaves a window in
which the file can be swapped for a pickle that runs code. So accel reads the bytes once
(never through a link, never blocking on a FIFO, only a regular file of the size the
manifest records), checks them against the manifest's checksum, unpickles them with an
unpickler that only knows DCP's metadata classes, and checks the object: that object,
and no file, is what DCP gets (:func:`load` hands it over from its reader's
``read_metadata``).

What the object may say (an allowlist; anything else is refused as damaged):

- every storage entry names a plain file of ``sharded/`` that the manifest lists (no
  ``/``, no ``..``, not ``.metadata``), with an offset and a length that are
  non-negative integers inside that file's recorded size, and no transforms (accel
  never writes any);
- every tensor has a shape of at most 64 non-negative dimensions whose bytes fit in
  the sharded files, and chunks inside that shape; its dtype is a torch dtype;
- the names and the planner's paths are strings (and list indices).

Relied on in DCP, the same in torch 2.6-2.15: the loader takes its metadata from the
storage reader's ``read_metadata()`` (public API); ``FileSystemReader`` opens every
file through ``self.fs.create_stream(path, "rb")`` with ``self.fs`` set in
``__init__``. ``tests/store/test_sharded.py`` proves both on the installed torch (a
swapped ``.metadata`` never unpickled, a FIFO swapped in for a shard refused).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import math
import os
import pickle
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

from accel._fs import open_regular
from accel.errors import DamagedFile, DoesNotFit, IntegrityError, one_line
from accel.layout import SHARDED_DIR
from accel.store.collectives import DistContext
from accel.store.hashing import FileDigest, digest_bytes, hash_file

__all__ = [
    "FOLDER",
    "METADATA",
    "load",
    "open_verified",
    "read_metadata",
    "save",
    "verify_share",
]

FOLDER = SHARDED_DIR
METADATA = ".metadata"


@contextlib.contextmanager
def _quiet(ctx: DistContext) -> Iterator[None]:
    """DCP's warnings that say nothing to the user: a single process is what we asked
    for (DCP need not warn that it assumed one), and torch's own deprecations."""
    with warnings.catch_warnings():
        # torch 2.6's DCP calls its own deprecated tensor.storage() on every save.
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
        if ctx.world_size == 1:
            # 2.7+: "... is disabled ..."; 2.6: "... is unavailable or uninitialized ..."
            warnings.filterwarnings(
                "ignore", message="torch.distributed is (disabled|unavailable or uninit)"
            )
        yield


def _single_process(dcp_call: Any, ctx: DistContext) -> dict[str, bool]:
    """DCP's ``no_dist`` for one rank: a keyword from torch 2.7 on; 2.6 has none and
    infers it the same way (no initialised process group: one process)."""
    if "no_dist" not in inspect.signature(dcp_call).parameters:
        return {}
    return {"no_dist": ctx.world_size == 1}


def save(sharded: Any, folder: Path, ctx: DistContext) -> dict[str, Any]:
    """``dcp.save`` into ``folder`` (a collective); digests of this rank's files."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    with _quiet(ctx):
        dcp_save(
            sharded,
            storage_writer=FileSystemWriter(str(folder), sync_files=True),
            process_group=ctx.group,
            **_single_process(dcp_save, ctx),
        )
    mine = [p for p in folder.iterdir() if p.name.startswith(f"__{ctx.rank}_")]
    if ctx.rank == 0:
        mine += [p for p in folder.iterdir() if not p.name.startswith("__")]
    out = {}
    for path in sorted(mine):
        checksum, size = hash_file(path)
        out[f"{FOLDER}/{path.name}"] = {"size": size, "checksum": checksum}
    return out


def verify_share(step_dir: Path, files: Mapping[str, FileDigest], ctx: DistContext) -> str | None:
    """Verify this rank's share of the sharded files; the first problem, or None."""
    names = sorted(n for n in files if n.startswith(f"{FOLDER}/"))
    for name in names[ctx.rank :: ctx.world_size]:
        try:
            checksum, size = hash_file(step_dir / name)
        except DamagedFile as exc:  # a FIFO, a link: this rank's problem, told to all
            return str(exc)
        except OSError as exc:
            return f"{step_dir / name} cannot be read ({exc.strerror})"
        if (size, checksum) != (files[name].size, files[name].checksum):
            return f"{step_dir / name} fails its checksum; it is corrupt"
    return None


def load(
    target: Any, folder: Path, metadata: Any, files: Mapping[str, FileDigest], ctx: DistContext
) -> None:
    """``dcp.load`` into ``target`` in place (a collective), from ``metadata`` as
    :func:`read_metadata` checked it against the manifest's ``files``, refusing unsafe
    pickles; IntegrityError for any failure inside DCP."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    refused: list[str] = []

    class CheckedReader(FileSystemReader):
        """Hands DCP the checked metadata: ``.metadata`` is never opened again; the shard
        files DCP opens are checked again (see :func:`_shard_files`)."""

        def __init__(self) -> None:
            super().__init__(str(folder))
            self.fs = _shard_files(folder, files)

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("rank") is not None:  # per-rank metadata: accel writes none
                raise FileNotFoundError(f"{folder} has only the global {METADATA}")
            _stamp(metadata, getattr(self, "load_id", None))
            return metadata

    class SafePlanner(DefaultLoadPlanner):
        def create_local_plan(self) -> Any:
            # The files were verified: a key or shape the plan cannot match is another
            # model's checkpoint (a changed definition), never a damaged one.
            try:
                plan = super().create_local_plan()
            except (RuntimeError, ValueError, KeyError) as exc:
                raise DoesNotFit(one_line(exc)) from None
            extra = _unexpected(self.state_dict, self.metadata)
            if extra:
                more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
                raise DoesNotFit(f"unexpected key(s) in checkpoint: {', '.join(extra[:3])}{more}")
            return plan

        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            try:
                torch.load(value, weights_only=True)
            except Exception as exc:  # noqa: BLE001 - refuse before DCP unpickles it
                refused.append(
                    f"{folder} was refused: it holds a value that is not plain data "
                    f"({type(exc).__name__}); accel never unpickles arbitrary objects"
                )
                raise IntegrityError(refused[-1]) from None
            value.seek(0)
            super().load_bytes(read_item, value)

    try:
        with _quiet(ctx):
            dcp_load(
                target,
                storage_reader=CheckedReader(),
                planner=SafePlanner(),
                process_group=ctx.group,
                **_single_process(dcp_load, ctx),
            )
    except (Exception, _checkpoint_exception()) as exc:  # noqa: BLE001 - one accel line
        # DCP wraps each rank's failure in CheckpointException, a BaseException.
        inner = _first_failure(exc)
        if not isinstance(inner, Exception):
            raise inner from None  # an interrupt stays one
        if refused or isinstance(inner, IntegrityError):
            raise IntegrityError(refused[0] if refused else str(inner)) from None
        if isinstance(inner, DoesNotFit):
            raise DoesNotFit(str(inner)) from None
        raise IntegrityError(_failure(folder, inner)) from None


def _unexpected(target: Mapping[str, Any], metadata: Any) -> list[str]:
    """The checkpoint's keys of a model being loaded that the model lacks (DCP loads what
    the target asks for and would leave them unread, as ``strict=False`` would)."""
    models = {".".join(key.split(".")[:2]) for key in target if key.startswith("model.")}
    return sorted(
        key
        for key in metadata.state_dict_metadata
        if key not in target and ".".join(key.split(".")[:2]) in models
    )


def _shard_files(folder: Path, files: Mapping[str, FileDigest]) -> Any:
    """DCP's file system for reading, opening only what was verified: a file of
    ``folder`` the manifest lists, never through a link, never blocking (a FIFO swapped
    in after the verification), a regular file of the size recorded."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    class ShardFiles(FileSystem):  # type: ignore[misc]
        @contextlib.contextmanager
        def create_stream(self, path: Any, mode: str) -> Iterator[Any]:
            path = Path(path)
            digest = files.get(f"{FOLDER}/{path.name}") if path.parent == folder else None
            if mode != "rb" or digest is None:
                raise IntegrityError(f"{path} is not a file of {folder} that accel verified")
            with open_verified(path, digest) as stream:
                yield stream

    return ShardFiles()


def _stamp(metadata: Any, load_id: Any) -> None:
    """What DCP's own ``read_metadata`` adds: this load's id (2.6-2.15 alike)."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = load_id


def _checkpoint_exception() -> type[BaseException]:
    from torch.distributed.checkpoint.api import CheckpointException

    return CheckpointException


def _first_failure(exc: BaseException) -> BaseException:
    """The first rank's own exception in DCP's wrapper (``exc`` itself when unwrapped)."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        wrapped = failures[min(failures)]
        inner = wrapped[0] if isinstance(wrapped, tuple) and wrapped else wrapped
        if isinstance(inner, BaseException):
            return inner
    return exc


def _failure(folder: Path, exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return (
        f"{folder} could not be loaded ({detail}): load it into a state shaped as it was "
        "saved (`accel checkpoints show` lists it), or delete the checkpoint if it is damaged"
    )


# -- the metadata -----------------------------------------------------------------------

_MAX_DIMS = 64

_METADATA_CLASSES_FROM = ("torch.distributed.checkpoint.metadata",)
_ALSO_ALLOWED = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),
    ("torch", "Size"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


# Python 3.13 pickles pathlib's classes as pathlib._local's, a module older Pythons lack
# (every sharded checkpoint saved there was refused as "not plain DCP metadata"): either
# name is the public class of this Python's pathlib, so a checkpoint moves between them.
_PATH_MODULES = ("pathlib", "pathlib._local")
_PATH_CLASSES = ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        import pathlib

        import torch

        if (module, name) in _ALSO_ALLOWED:
            return super().find_class(module, name)
        if module in _PATH_MODULES and name in _PATH_CLASSES:
            return getattr(pathlib, name)
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


# -- the metadata object ----------------------------------------------------------------


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
