"""Hugging Face Accelerate's checkpoint calls, on accel's crash-safe store.

``save_state("ckpt/epoch_1")`` commits the checkpoint into the workspace's store, as
``save_state(step)`` does (manifest, checksums, all-or-nothing, a collective), in a
series of its own for that folder (``hf-<folder name>-<hash of its path>``), then writes
``ckpt/epoch_1/accel-checkpoint.json`` naming it: the folder exists as the script
expects, and ``load_state("ckpt/epoch_1")`` finds, verifies and restores what it names.
With ``ProjectConfiguration(automatic_checkpoint_naming=True)`` the folder is
``<project_dir>/checkpoints/checkpoint_<iteration>`` and ``total_limit`` keeps the
newest folders, as in Accelerate. ``save_model`` writes ``model.safetensors`` (sharded
with an index past ``max_shard_size``) and ``save`` one file, atomically, on the main
process. An Accelerate checkpoint folder (pickles) is refused: accel never unpickles.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from accel.accelerator import _ddp
from accel.errors import UsageError, WriteFailed, storage_error

if TYPE_CHECKING:
    from accel.accelerator._hfargs import ProjectConfiguration
    from accel.store.checkpoints import Checkpoints
    from accel.workspace import Workspace


class Accelerator(Protocol):
    """What of ``accel.Accelerator`` a folder checkpoint needs (no import circle)."""

    project_configuration: ProjectConfiguration
    workspace: Workspace

    @property
    def is_main_process(self) -> bool: ...

    def wait_for_everyone(self) -> None: ...


POINTER = "accel-checkpoint.json"
PROJECT_CHECKPOINTS_DIR = "checkpoints"  # Accelerate's <project_dir>/checkpoints/checkpoint_<n>
_STATEFUL = ("state_dict", "load_state_dict")
_HF_FILES = ("model.safetensors", "pytorch_model.bin", "optimizer.bin", "random_states_0.pkl")


class RemovableHandle:
    """What ``register_*_hook`` returns: ``remove()`` unregisters the hook."""

    def __init__(self, hooks: dict[int, Callable[..., Any]], hook: Callable[..., Any]) -> None:
        self._hooks, self.id = hooks, id(hook)
        hooks[self.id] = hook

    def remove(self) -> None:
        self._hooks.pop(self.id, None)


def series_for(folder: Path) -> str:
    """The store series of a checkpoint folder: readable, unique per absolute path."""
    digest = hashlib.sha256(str(folder).encode("utf-8")).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9._-]", "-", folder.name)[:60].lstrip(".-") or "dir"
    return f"hf-{name}-{digest}"


def as_step(value: Any) -> int | None:
    """``value`` as ``save_state``'s step when it is an integer (numpy's, a 0-d integer
    tensor's too: ``operator.index``); None for anything else (a folder, or wrong)."""
    if isinstance(value, (bool, str, os.PathLike)) or value is None:
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def one_of(step: Any, **keyword: Any) -> Any:
    """``step``, or Accelerate's keyword for the folder (``output_dir=``, ``input_dir=``):
    a script's ``load_state(input_dir=...)`` had loaded the newest step instead."""
    ((name, value),) = keyword.items()
    if value is None:
        return step
    if step is not None:
        raise UsageError(f"give a step or {name}=, not both")
    return value


def output_folder(acc: Accelerator, output_dir: Any) -> Path:
    """Where ``save_state(output_dir)`` goes (Accelerate's automatic naming included);
    one UsageError line when it cannot. Not a collective: see :func:`make_room`."""
    project = acc.project_configuration
    if output_dir is not None and not isinstance(output_dir, (str, os.PathLike)):
        raise UsageError(
            f"save_state() takes a step (an integer) or a folder (a path), got "
            f"{type(output_dir).__name__} {output_dir!r:.40}"
        )
    if not project.automatic_checkpoint_naming:
        if output_dir is None:
            raise UsageError(
                "save_state() needs a step (accel) or a folder (Accelerate), or "
                "ProjectConfiguration(automatic_checkpoint_naming=True)"
            )
        return Path(os.fspath(output_dir)).absolute()
    if project.project_dir is None:
        raise UsageError("automatic_checkpoint_naming needs project_dir")
    root = Path(project.project_dir).absolute() / PROJECT_CHECKPOINTS_DIR
    folder = root / f"checkpoint_{project.iteration}"
    if folder.exists():
        raise UsageError(
            f"checkpoint folder {folder} already exists; set "
            "project_configuration.iteration to the iteration to continue from"
        )
    return folder


def meet(acc: Accelerator, name: str) -> None:
    """A barrier for ``name``'s folder steps that cannot hang: every rank first meets on
    the job's store (``checkpoints.arrival_timeout`` at most, then every rank that
    waited fails with one CollectiveMismatch line naming who came, as ``save_state(step)``
    does), and only then enters the process group's barrier, which everyone has reached.
    Without it ``if accelerator.is_main_process: accelerator.save_state()`` under
    automatic naming waited in a plain barrier for gloo's 30 minutes."""
    from accel.store.collectives import arrive, named

    with named(name):
        arrive(name, float(acc.workspace.settings.checkpoints.arrival_timeout))
    acc.wait_for_everyone()


def make_room(acc: Accelerator, folder: Path) -> None:
    """Accelerate's ``total_limit`` for the new ``folder``: the main process deletes the
    oldest ``checkpoint_<n>`` folders, once every rank has come to the save (a save on
    the main process only deletes nothing) and before any rank creates ``folder``."""
    limit = acc.project_configuration.total_limit
    if limit is None:
        return
    if acc.is_main_process:
        _keep_newest(folder.parent, limit - 1)
    meet(acc, "save_state")  # bounded: a deletion that failed on rank 0 hangs no rank


def _keep_newest(root: Path, keep: int) -> None:
    """Accelerate's ``total_limit``: delete the oldest ``checkpoint_<n>`` folders."""
    if not root.is_dir():
        return
    found = sorted(
        (int(m.group(1)), entry)
        for entry in root.iterdir()
        if (m := re.fullmatch(r"checkpoint_(\d+)", entry.name)) and entry.is_dir()
    )
    for _, entry in found[: max(len(found) - max(keep, 0), 0)]:
        shutil.rmtree(entry)


def write_pointer(acc: Accelerator, folder: Path, series: str, step: int) -> None:
    from accel._fs import atomic_write_json

    if acc.is_main_process:
        atomic_write_json(folder / POINTER, {"format": 1, "series": series, "step": step})
    meet(acc, "save_state")  # bounded: a write that failed on rank 0 hangs no rank


def read_pointer(folder: Path) -> tuple[str, int]:
    """The series and step a ``save_state(folder)`` wrote; one line when there is none."""
    from accel._fs import read_json
    from accel.layout import SERIES_RE

    pointer = folder / POINTER
    if not pointer.is_file():
        if any((folder / name).exists() for name in _HF_FILES):
            raise UsageError(
                f"{folder} is a Hugging Face Accelerate checkpoint (pickled files): accel "
                "never unpickles; load its model.safetensors into the model yourself, "
                "or resume from a checkpoint accel's save_state wrote"
            )
        what = "does not exist" if not folder.exists() else f"holds no {POINTER}"
        raise UsageError(
            f"load_state({str(folder)!r}): the folder {what}; pass a folder "
            "save_state(folder) wrote, or a step, or nothing for the latest checkpoint"
        )
    data = read_json(pointer, limit=4096)
    series, step = (data.get("series"), data.get("step")) if isinstance(data, dict) else (0, 0)
    if not (isinstance(series, str) and SERIES_RE.fullmatch(series) and isinstance(step, int)):
        raise UsageError(f"{pointer} is damaged: it names no checkpoint (save the state again)")
    return series, step


def latest_folder(acc: Accelerator) -> Path:
    """``load_state()`` under automatic naming: the newest ``checkpoint_<n>`` folder."""
    root = Path(str(acc.project_configuration.project_dir)).absolute() / PROJECT_CHECKPOINTS_DIR
    found = sorted(
        (int(m.group(1)), entry)
        for entry in (root.iterdir() if root.is_dir() else ())
        if (m := re.fullmatch(r"checkpoint_(\d+)", entry.name))
    )
    if not found:
        raise UsageError(f"load_state(): no checkpoint_<n> folder in {root}")
    return found[-1][1]


def save_model(state: dict[str, Any], folder: Path, max_shard_size: int | str, safe: bool) -> None:
    """``model.safetensors`` (or ``pytorch_model.bin``), sharded past ``max_shard_size``
    with Accelerate's index file; every file written atomically."""
    import json

    from accel._fs import atomic_open, atomic_write
    from accel.units import parse_size

    limit = parse_size(max_shard_size)
    state = {k: v.detach().cpu().contiguous() for k, v in _unshared(state).items()}
    shards = _shards(state, int(limit))
    base, ext = ("model", ".safetensors") if safe else ("pytorch_model", ".bin")
    names = (
        [f"{base}{ext}"]
        if len(shards) == 1
        else [f"{base}-{i + 1:05d}-of-{len(shards):05d}{ext}" for i in range(len(shards))]
    )
    folder.mkdir(parents=True, exist_ok=True)
    for name, shard in zip(names, shards, strict=True):
        with atomic_open(folder / name, "wb") as out:
            out.write(_serialize(shard, safe))
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
            "weight_map": {
                k: name for name, shard in zip(names, shards, strict=True) for k in shard
            },
        }
        atomic_write(folder / f"{base}{ext}.index.json", json.dumps(index, indent=2) + "\n")


def _unshared(state: dict[str, Any]) -> dict[str, Any]:
    """Tied weights once (safetensors refuses shared storage), the first name kept."""
    seen: set[tuple[Any, int, tuple[int, ...]]] = set()
    out = {}
    for key, tensor in state.items():
        mark = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.device.type != "meta" and mark in seen:
            continue
        seen.add(mark)
        out[key] = tensor
    return out


def _shards(state: dict[str, Any], limit: int) -> list[dict[str, Any]]:
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for key, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][key] = tensor
        size += nbytes
    return shards


def _serialize(state: dict[str, Any], safe: bool) -> bytes:
    if safe:
        from safetensors.torch import save

        return save(state, metadata={"format": "pt"})
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def save_object(obj: Any, path: Any, safe: bool) -> None:
    """Accelerate's ``save``: ``obj`` to one file (safetensors or ``torch.save``), atomically."""
    from accel._fs import atomic_open

    data = _serialize(obj, safe) if safe else _serialize_any(obj)
    with atomic_open(Path(os.fspath(path)), "wb") as out:
        out.write(data)


def _serialize_any(obj: Any) -> bytes:
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


class FolderApi:
    """Accelerate's folder checkpoints, hooks and model export, for ``Accelerator``."""

    project_configuration: ProjectConfiguration
    _models: list[Any]
    _sharder: Any
    _save_hooks: dict[int, Any]
    _load_hooks: dict[int, Any]
    _custom_objects: list[Any]
    _stores: dict[str, Checkpoints]
    _store: Checkpoints | None
    workspace: Workspace

    if TYPE_CHECKING:  # the Accelerator's own

        @property
        def is_main_process(self) -> bool: ...
        def wait_for_everyone(self) -> None: ...
        def get_state_dict(self, model: Any, unwrap: bool = True) -> dict[str, Any]: ...
        @staticmethod
        def unwrap_model(model: Any) -> Any: ...
        def _save(
            self, step: int, *, async_save: bool | None = None, weights: list[Any] | None = None
        ) -> Any: ...
        def _load(self, step: int | None, models: list[Any]) -> int | None: ...

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    def _save_to_folder(self, output_dir: Any) -> str:
        folder = output_folder(self, output_dir)
        # Every rank comes before the first collective (pruning's barrier, a hook's):
        # a save on the main process only fails in one line instead of hanging.
        meet(self, "save_state")
        if self.project_configuration.automatic_checkpoint_naming:
            make_room(self, folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a read-only mount: the line a checkpoint's write gives
            raise WriteFailed(str(storage_error(exc, "create the folder", folder))) from None
        weights = None
        if self._save_hooks and self._sharder is None:
            weights = [self.get_state_dict(m) for m in self._models]
            for hook in list(self._save_hooks.values()):
                hook(self._models, weights, str(folder))
        series, step = series_for(folder), self.project_configuration.iteration
        with self._series(series):
            self._save(step, async_save=False, weights=weights)
        write_pointer(self, folder, series, step)
        self.project_configuration.iteration += 1
        return str(folder)

    @contextlib.contextmanager
    def _series(self, series: str) -> Iterator[None]:
        """``self.checkpoints`` is ``series``' store for the duration (one per series,
        kept). The folders' stores share one group: each saves and loads in this thread,
        one at a time, never in the background."""
        from accel.store.checkpoints import Checkpoints

        store = self._stores.get(series)
        if store is None:
            settings = self.workspace.settings
            known = next(iter(self._stores.values()), None)
            store = Checkpoints(
                self.workspace.layout,
                settings.checkpoints,
                series=series,
                run_name=settings.launch.run_name,
                group=known.group if known is not None else None,
            )
            self._stores[series] = store
        self._store = store
        try:
            yield
        finally:
            self._store = None

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Objects with ``state_dict``/``load_state_dict`` saved and restored with the rest."""
        invalid = [
            o for o in objects if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict"))
        ]
        if invalid:
            raise UsageError(
                "register_for_checkpointing takes objects with state_dict() and "
                f"load_state_dict(); {type(invalid[0]).__name__} has not both"
            )
        self._custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: Any) -> Any:
        """``hook(models, weights, output_dir)`` before ``save_state(folder)`` saves."""
        from accel.accelerator._hfstate import RemovableHandle

        return RemovableHandle(self._save_hooks, hook)

    def register_load_state_pre_hook(self, hook: Any) -> Any:
        """``hook(models, input_dir)`` before ``load_state(folder)`` restores."""
        from accel.accelerator._hfstate import RemovableHandle

        return RemovableHandle(self._load_hooks, hook)

    def save_model(
        self,
        model: Any,
        save_directory: str | os.PathLike[str],
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        """The model's weights as ``model.safetensors`` (sharded past ``max_shard_size``),
        written by the main process (every rank calls it: under FSDP it gathers)."""
        from accel.accelerator._hfstate import save_model

        state = self.get_state_dict(model)
        if self.is_main_process:
            save_model(state, Path(os.fspath(save_directory)), max_shard_size, safe_serialization)

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``obj`` to ``f`` (``torch.save``, or safetensors), by the main process, atomically."""
        from accel.accelerator._hfstate import save_object

        if self.is_main_process:
            save_object(obj, f, safe_serialization)

    def _load_from_folder(self, input_dir: Any) -> int | None:
        folder = (
            Path(os.fspath(input_dir)).absolute() if input_dir is not None else latest_folder(self)
        )
        series, step = read_pointer(folder)
        models = list(self._models)
        for hook in list(self._load_hooks.values()):
            hook(models, str(folder))
        with self._series(series):
            return self._load(step, [_ddp.unwrap(m, keep_torch_compile=False) for m in models])
