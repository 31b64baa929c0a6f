"""Sharded state (FSDP / DTensor) through ``torch.distributed.checkpoint``, made safe.

DCP writes one ``__<rank>_<n>.distcp`` file per rank and a ``.metadata`` file; accel
puts them in the checkpoint's ``sharded/`` folder, hashes them like its own files and
lists them in the manifest. On load, the ranks share the verification of every file
before DCP reads any of them.

DCP itself unpickles ``.metadata`` with ``pickle.load`` and non-tensor values with
``torch.load(weights_only=False)``. accel checks both first: the metadata with an
unpickler that only knows DCP's metadata classes, the values with ``weights_only=True``.
Anything else is refused before DCP unpickles it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import pickle
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from accel.errors import IntegrityError
from accel.store._dist import DistContext
from accel.store._hashing import FileDigest, hash_file

FOLDER = "sharded"
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
        import importlib

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


def check_metadata(path: Path) -> None:
    """Refuse a ``.metadata`` file that names anything but DCP's metadata classes."""
    try:
        _MetadataUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception as exc:  # noqa: BLE001 - any failure means: do not unpickle it
        raise IntegrityError(
            f"{path} was refused: it is not plain DCP metadata ({exc}); delete the checkpoint"
        ) from None


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
            checksum, size = hash_file(step_dir / name, follow_links=False)
        except OSError as exc:
            return f"{step_dir / name} cannot be read ({exc.strerror})"
        if (size, checksum) != (files[name].size, files[name].checksum):
            return f"{step_dir / name} fails its checksum; it is corrupt"
    return None


def load(target: Any, folder: Path, ctx: DistContext) -> None:
    """``dcp.load`` into ``target`` in place (a collective), refusing unsafe pickles."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    refused: list[str] = []

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            rank = kwargs.get("rank")
            path = folder / (".metadata" if rank is None else f"__{rank}.metadata")
            if path.exists():  # a missing one is DCP's to report (it probes per-rank files)
                try:
                    check_metadata(path)
                except IntegrityError as exc:
                    refused.append(str(exc))
                    raise
            return super().read_metadata(*args, **kwargs)

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
                storage_reader=SafeReader(str(folder)),
                planner=SafePlanner(),
                process_group=ctx.group,
                **_single_process(dcp_load, ctx),
            )
    except BaseException:
        # DCP wraps each rank's failure in CheckpointException, a BaseException.
        if refused:
            raise IntegrityError(refused[0]) from None
        raise
