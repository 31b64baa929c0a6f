"""Sharded state (FSDP / DTensor) through ``torch.distributed.checkpoint``, made safe.

DCP writes one ``__<rank>_<n>.distcp`` file per rank and a ``.metadata`` file; accel
puts them in the checkpoint's ``sharded/`` folder, hashes them like its own files and
lists them in the manifest. On load, the ranks share the verification of every file
before DCP reads any of them.

DCP itself unpickles ``.metadata`` with ``pickle.load`` and non-tensor values with
``torch.load(weights_only=False)``. accel never lets it: the metadata is read once and
checked by :mod:`accel.store._dcp_meta`, and DCP's reader is handed that checked object
(it never opens ``.metadata``); the values are checked with ``weights_only=True``
before DCP unpickles them. The shard files DCP opens after the verification are opened
only as the manifest lists them (no link, no FIFO, the recorded size). Every failure
inside DCP (its ``CheckpointException`` is a ``BaseException``) comes out as one
:class:`IntegrityError` line.

Relied on in DCP, the same in torch 2.6-2.15: the loader takes its metadata from the
storage reader's ``read_metadata()`` (public API); ``FileSystemReader`` opens every
file through ``self.fs.create_stream(path, "rb")`` with ``self.fs`` set in
``__init__``. ``tests/store/test_sharded.py`` proves both on the installed torch (a
swapped ``.metadata`` never unpickled, a FIFO swapped in for a shard refused).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from accel.errors import DamagedFile, IntegrityError
from accel.store._dcp_meta import FOLDER, METADATA, open_verified, read_metadata
from accel.store._hashing import FileDigest, hash_file
from accel.store.collectives import DistContext

__all__ = ["FOLDER", "load", "read_metadata", "save", "verify_share"]


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
        raise IntegrityError(_failure(folder, inner)) from None


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
