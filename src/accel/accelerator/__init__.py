"""``accel.Accelerator``: the small facade a training script uses.

Works the same under ``accel launch``, under plain ``torchrun`` and as a single
``python train.py``: it reads the torchrun environment (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``), sets up the process group when
there is more than one rank (nccl on GPU, gloo on CPU) and tears it down at the end.
Inside a world another launcher already started (Ray Train, ``mp.spawn`` and
``init_process_group``), it joins that group: its rank and size are the group's, and
the group stays the starter's to end.

Precision comes from the ``mixed_precision`` argument, else
``ACCELERATE_MIXED_PRECISION`` (set by ``accel launch``), else the config's
``launch.mixed_precision``; CPU mode likewise from ``cpu``, ``ACCELERATE_USE_CPU``,
``launch.use_cpu``, or the absence of a GPU. fp16 comes with a gradient scaler
(``torch.amp.GradScaler``, on CUDA and on the CPU): ``backward()`` scales the loss and
every prepared optimizer's ``step()`` unscales, skips a step whose gradients overflowed
and updates the scale, as Hugging Face Accelerate's prepared optimizers do.

FSDP comes from ``fsdp``, else ``ACCELERATE_USE_FSDP`` (set by ``accel launch``), else
``launch.fsdp``: ``prepare()`` then shards models with FSDP2 instead of wrapping them in
DDP (see :mod:`accel.accelerator._fsdp`).

Checkpoints go through the workspace's store (``ws.checkpoints``): ``save_state``
commits every prepared model, optimizer, scheduler and data loader plus each rank's
RNG states; ``load_state`` restores the latest committed one, so a restarted run
continues exactly where the checkpoint left it (bit for bit on CPU). Sharded models
and their optimizers go through ``torch.distributed.checkpoint`` inside the same commit.

It is also Hugging Face Accelerate's ``Accelerator`` for scripts ported by changing one
import: its constructor arguments (:mod:`accel.accelerator._hfargs`), calls
(:mod:`accel.accelerator._hfapi`, :mod:`accel.accelerator._hfstate`) and data sharding
(:mod:`accel.accelerator._hfdata`), which is the default unless ``seed`` asks for accel's
seeded sampler; docs/worker-api.md has the table.

The facade's private parts live beside it, one concern per module: ``_setup`` (rank,
precision, device, process group), ``_data`` (accel's sharded, resumable loaders),
``_rng``, ``_scaling`` (fp16), ``_metrics``, ``_stop``, ``_resume``, ``_accumulate``;
Accelerate's API in ``_hfargs``, ``_hfapi``, ``_ops`` (the collectives), ``_hfdata``,
``_hfstate`` and ``_trackers``; FSDP2 in ``_fsdp`` (its settings, which the launcher
reads too, are :mod:`accel.config.fsdp`).
"""

from __future__ import annotations

import atexit
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.accelerator import _ddp
from accel.accelerator import _hfargs as hfargs
from accel.accelerator import _setup as setup
from accel.accelerator._accumulate import (
    GradientState,
    PreparedScheduler,
    accumulation_options,
    gate_steps,
)
from accel.accelerator._data import (
    IterableLoader,
    PreparedDataLoader,
    is_stateful,
    shard_loader,
)
from accel.accelerator._hfapi import ProcessApi
from accel.accelerator._hfargs import DataLoaderConfiguration, DistributedType, ProjectConfiguration
from accel.accelerator._hfdata import HfData, HfLoader, shard_hf
from accel.accelerator._hfstate import FolderApi, as_step, one_of
from accel.accelerator._metrics import MetricsLog
from accel.accelerator._rng import rng_state, set_rng_state
from accel.accelerator._scaling import scale_steps
from accel.accelerator._snapshots import checkpoint_state
from accel.accelerator._stop import StopWatch, agreed
from accel.config.fsdp import resolve as resolve_fsdp
from accel.errors import UsageError
from accel.workspace import Workspace

if TYPE_CHECKING:
    from accel.accelerator._fsdp.shard import Sharder
    from accel.accelerator._snapshots import Snapshots
    from accel.config.fsdp import FsdpSettings
    from accel.store.cache import CacheEntryInfo
    from accel.store.checkpoints import Checkpoints

__all__ = ["Accelerator", "DataLoaderConfiguration", "DistributedType", "ProjectConfiguration"]


class Accelerator(ProcessApi, FolderApi):
    """Rank, device, process group, ``prepare()``, precision, checkpoints, metrics; and
    Hugging Face Accelerate's common API (:mod:`accel.accelerator._hfapi`), its constructor
    arguments included (:mod:`accel.accelerator._hfargs`)."""

    def __init__(
        self,
        *,
        mixed_precision: str | None = None,
        cpu: bool | None = None,
        seed: int | None = None,
        workspace: Workspace | None = None,
        log_all_ranks: bool = False,
        fsdp: bool | None = None,
        hf_compat: bool | None = None,
        device_placement: bool | None = None,
        split_batches: bool | None = None,
        gradient_accumulation_steps: int | None = None,
        dataloader_config: Any = None,
        rng_types: Any = None,
        log_with: Any = None,
        project_dir: str | os.PathLike[str] | None = None,
        project_config: Any = None,
        gradient_accumulation_plugin: Any = None,
        step_scheduler_with_optimizer: bool | None = None,
        kwargs_handlers: Any = None,
        dynamo_backend: Any = None,
        dynamo_plugin: Any = None,
        deepspeed_plugin: Any = None,
        deepspeed_plugins: Any = None,
        fsdp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        torch_tp_plugin: Any = None,
        parallelism_config: Any = None,
    ) -> None:
        given = {k: v for k, v in locals().items() if k in hfargs.HF_ARGUMENTS}
        hfargs.refuse_unsupported(given)
        env = dict(os.environ)
        self._handlers = hfargs.handlers(kwargs_handlers)
        self._gradient_state = GradientState(
            accumulation_options(gradient_accumulation_steps, gradient_accumulation_plugin, env)
        )
        #: Accelerate's semantics for loaders and schedulers (:mod:`accel.accelerator._hfdata`),
        #: unless ``seed`` asks for accel's seeded, epoch-ordered sampler (Accelerate has no
        #: ``seed``: a ported script never passes it) and no argument only Accelerate has is
        #: given. ``hf_compat`` decides outright.
        self.hf_compat = (
            seed is None or any(v is not None for v in given.values())
            if hf_compat is None
            else bool(hf_compat)
        )
        self.project_configuration = hfargs.project_options(project_dir, project_config)
        options = hfargs.dataloader_options(dataloader_config)
        self.dataloader_config = options
        self.device_placement = device_placement is not False
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer is not False
        from accel.accelerator._trackers import requested

        self._trackers_wanted = requested(log_with, self.project_configuration.logging_dir)
        self.trackers: list[Any] = []
        self.workspace = workspace or Workspace.discover()
        self.rank, self.local_rank, self.world_size = setup.where(env)
        self.run_id = env.get("ACCEL_RUN_ID") or None
        self.seed = 0 if seed is None else seed
        self.log_all_ranks = log_all_ranks
        self.mixed_precision = setup.precision(mixed_precision, env, self.workspace)
        self.device = setup.device(cpu, env, self.workspace, self.local_rank)
        self.fsdp = resolve_fsdp(fsdp, env, self.workspace.settings.launch)
        self.scaler = setup.grad_scaler(self.mixed_precision, self.device, self._handlers.scaler)
        self._dynamo = (
            hfargs.dynamo_backend(dynamo_backend, dynamo_plugin, env) if self.hf_compat else None
        )
        self._hf_data = HfData(
            self.world_size,
            self.rank,
            split_batches=options.split_batches,
            even_batches=options.even_batches,
            seedable=options.use_seedable_sampler,
            data_seed=options.data_seed,
            rng_types=hfargs.rng_kinds(rng_types),
            device=self.device if self.device_placement else None,
            non_blocking=options.non_blocking,
        )
        self._owns_group = setup.init_group(
            self.world_size, self.rank, self.device, self._handlers.process_group
        )
        setup.share_with_accelerate(self.device)
        self._custom_objects: list[Any] = []
        self._save_hooks: dict[int, Any] = {}
        self._load_hooks: dict[int, Any] = {}
        self._stores: dict[str, Checkpoints] = {}
        self._store: Checkpoints | None = None
        self._sharder: Sharder | None = None
        self._models: list[Any] = []
        self._optimizers: list[Any] = []
        self._schedulers: list[Any] = []
        self._loaders: list[Any] = []
        self._snapshots: Snapshots | None = None
        self.extra_state: Any = None
        self._ended = False
        self._metrics = MetricsLog(self.workspace, self.run_id, self.rank)
        self._stop = StopWatch()
        atexit.register(_end_at_exit, weakref.ref(self))

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_rank == 0

    @property
    def checkpoints(self) -> Checkpoints:
        """The workspace's checkpoint store (``save``, ``load``, ``list``, ``latest``)."""
        return self._store or self.workspace.checkpoints

    def end(self) -> None:
        """Finish pending saves, wait for every rank, tear down the process group."""
        self._end(barrier=True)

    def _end(self, *, barrier: bool) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            if self._snapshots is not None:
                self._snapshots.settle()
                self._snapshots.unmap()
            self.workspace.checkpoints.wait()
            # No peer still inside its last collective (e.g. the checkpoint commit) as
            # the group goes, here or by a joined world's starter right after end(). Not
            # at exit: a rank dying of an exception must not wait for peers never coming.
            if barrier:
                self.wait_for_everyone()
        finally:
            self._metrics.close()
            self._stop.restore()
            if self._owns_group:
                setup.end_group(at_exit=not barrier)
            elif barrier:  # the script destroys its group: our collectives end here
                setup.wait_for_gloo_workers()

    # -- prepare ------------------------------------------------------------------------

    def prepare(self, *objs: Any, device_placement: Any = None) -> Any:
        """Models to the device (+ DDP), loaders sharded; optimizers/schedulers tracked."""
        prepared = tuple(self._prepare_one(obj) for obj in objs)
        return prepared[0] if len(prepared) == 1 else prepared

    def _prepare_one(self, obj: Any) -> Any:
        import torch

        if isinstance(obj, torch.nn.Module):
            return self._prepare_model(obj)
        if isinstance(obj, torch.optim.Optimizer):
            if self._sharder is not None:
                self._sharder.adopt(obj)
            if self.scaler is not None:
                scale_steps(obj, self.scaler)
            if self.hf_compat or self.gradient_accumulation_steps > 1:
                gate_steps(obj, self._gradient_state)
            obj.register_load_state_dict_pre_hook(setup.WaitForSnapshot(self))
            if not self._optimizers:
                self._count_steps(obj)
            self._optimizers.append(obj)
            return obj
        if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            if self.hf_compat:
                times = 1 if self._hf_data.split_batches else self.world_size
                with_optimizer = self.step_scheduler_with_optimizer
                obj = PreparedScheduler(obj, self._gradient_state, times, with_optimizer)
            self._schedulers.append(obj)
            return obj
        if isinstance(obj, (PreparedDataLoader, HfLoader, IterableLoader)):
            return obj  # prepared already
        if isinstance(obj, torch.utils.data.DataLoader):
            loader: Any
            if self.hf_compat and not is_stateful(obj):
                loader = shard_hf(obj, self._hf_data, self._gradient_state)
            else:
                loader = shard_loader(obj, self.world_size, self.rank, self.seed)
            self._loaders.append(loader)
            return loader
        raise UsageError(
            f"prepare() does not know {type(obj).__name__}: pass models, optimizers, "
            "LR schedulers and DataLoaders"
        )

    def _count_steps(self, optimizer: Any) -> None:
        """``checkpoints.snapshot_every``: snapshots every N of this optimizer's steps."""
        from accel.store.memtier import snapshot_settings

        every, persist = snapshot_settings(self.workspace.settings.checkpoints)
        if every is None:
            return
        from accel.accelerator._snapshots import Snapshots

        self._snapshots = Snapshots(self, every, persist)
        self._snapshots.hook(optimizer)

    def _prepare_model(self, model: Any, evaluation_mode: bool = False) -> Any:
        if self.device_placement:
            model = model.to(self.device)
        if self.hf_compat and self.mixed_precision != "no":
            setup.autocast_forward(model, self.autocast)  # Accelerate autocasts forward itself
        if self.world_size > 1 and self.fsdp is not None and not evaluation_mode:
            model = self._shard(model, self.fsdp)
        elif self.world_size > 1 and not evaluation_mode:  # Accelerate's: no DDP to infer
            ids = [self.device.index] if self.device.type == "cuda" else None
            compiled = self._dynamo is not None
            model = _ddp.wrap(model, ids, self._handlers.ddp, compiled=compiled)
        if self._dynamo is not None:
            import torch

            model = torch.compile(model, backend=self._dynamo)
        model.register_load_state_dict_pre_hook(setup.WaitForSnapshot(self))
        self._models.append(model)
        return model

    def _shard(self, model: Any, settings: FsdpSettings) -> Any:
        if self._sharder is None:
            from accel.accelerator._fsdp.shard import Sharder

            self._sharder = Sharder(settings, self.device, self.world_size)
        return self._sharder.shard(model, self._optimizers)

    @staticmethod
    def unwrap_model(
        model: Any, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> Any:
        """The module inside DDP (and inside ``torch.compile`` unless ``keep_torch_compile``);
        ``keep_fp32_wrapper=False`` takes the autocast off its ``forward`` (as Accelerate)."""
        if not keep_fp32_wrapper:
            setup.strip_autocast(_ddp.unwrap(model, keep_torch_compile=False))
        return _ddp.unwrap(model, keep_torch_compile)

    def get_state_dict(self, model: Any, unwrap: bool = True) -> dict[str, Any]:
        """The full state dict of ``model``, on every rank as in Accelerate.

        Under FSDP a collective (every rank calls it; the shards are gathered to rank 0,
        on the CPU) that gives ``{}`` on the other ranks, as Accelerate's FSDP does;
        otherwise the unwrapped model's own ``state_dict()``.
        """
        model = _ddp.unwrap(model, keep_torch_compile=False) if unwrap else model
        if self._sharder is None:
            return dict(model.state_dict())
        from accel.accelerator._fsdp.state import full_state_dict

        return full_state_dict(model, self.rank)

    # -- training helpers ---------------------------------------------------------------

    def autocast(self, autocast_handler: Any = None) -> Any:
        """Autocast per the configured precision (a no-op for ``no``), a context manager and
        a decorator; an ``AutocastKwargs`` (or the one in ``kwargs_handlers``) sets
        ``enabled`` and ``cache_enabled``."""
        options = self._handlers.autocast
        if autocast_handler is not None:
            options = hfargs.handlers([autocast_handler]).autocast
        return setup.autocast(self.mixed_precision, self.device, options)

    def backward(self, loss: Any, **kwargs: Any) -> None:
        """``loss.backward()``; with fp16, of the loss times the scaler's scale; while
        accumulating, of the loss over ``gradient_accumulation_steps`` (as Accelerate)."""
        if self.gradient_accumulation_steps > 1:
            loss = loss / self.gradient_accumulation_steps
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward(**kwargs)

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> Any:
        """``torch.nn.utils.clip_grad_norm_`` of the true (unscaled) gradients."""
        import torch

        if self.scaler is not None:
            for optimizer in self._optimizers:
                self.scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        if self._sharder is None:
            return norm
        from accel.accelerator._fsdp.state import plain

        return plain(norm)  # FSDP: a DTensor, the same total on every rank

    def should_stop(self) -> bool:
        """Whether the job was asked to stop (SIGTERM, or SLURM's ``--signal=USR1@90``):
        call it at the end of each step; when True, ``save_state`` that step and return.
        A collective (every rank calls it, every rank gets the same answer). Once it has
        been called (on the main thread), the signal no longer ends the process at once:
        the script decides."""
        self._stop.listen()
        return agreed(self._stop.signum is not None, self.world_size, self.device)

    def wait_for_everyone(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    # -- metrics ------------------------------------------------------------------------

    @property
    def metrics_file(self) -> Path:
        """``logs/runs/<ACCEL_RUN_ID>/metrics.jsonl``, or ``logs/runs/local/`` outside a run."""
        return self._metrics.file

    def log(
        self,
        metrics: dict[str, Any],
        step: int | None = None,
        log_kwargs: dict[str, Any] | None = None,
        *,
        all_ranks: bool | None = None,
    ) -> None:
        """Append ``{"step", "time", "rank", **metrics}`` to the run's metrics file, and
        hand ``metrics`` to the ``log_with`` trackers (Accelerate's ``log``).

        Main process only unless ``all_ranks``. A write error is logged, never raised:
        metrics must not kill training.
        """
        if self.is_main_process:
            for tracker in self.trackers:
                tracker.log(metrics, step=step, **(log_kwargs or {}).get(tracker.name, {}))
        if self.is_main_process or (self.log_all_ranks if all_ranks is None else all_ranks):
            from accel.accelerator._trackers import flat_metrics

            self._metrics.write(flat_metrics(metrics), step)  # type: ignore[arg-type]

    def heartbeat(self) -> None:
        """Tell ``accel launch --hang-timeout`` this rank is alive (a long quiet phase)."""
        from accel.hang.worker import heartbeat

        heartbeat()

    # -- checkpoints --------------------------------------------------------------------

    def save_state(
        self,
        step: int | str | os.PathLike[str] | None = None,
        *,
        tag: str | None = None,
        extra: Any = None,
        async_save: bool | None = None,
        safe_serialization: bool = True,
        output_dir: str | os.PathLike[str] | None = None,
    ) -> Any:
        """Checkpoint every prepared object, the RNG states and ``step`` (a collective).

        Given a folder instead of a step (Accelerate's ``save_state(output_dir)``), the
        same commit goes into that folder's own series and the folder names it
        (:mod:`accel.accelerator._hfstate`); returns the folder.
        """
        step = one_of(step, output_dir=output_dir)  # Accelerate's keyword
        if (at := as_step(step)) is not None:  # numpy's integers too
            return self._save(at, tag=tag, extra=extra, async_save=async_save)
        return self._save_to_folder(step)

    def wait_for_snapshot(self) -> None:
        """Wait until the snapshot of the async ``save_state`` in flight is copied (not
        written): then parameters may change outside an optimizer's ``step()``, which
        waits for it itself (docs/worker-api.md, "Overlapped snapshots")."""
        for store in {id(s): s for s in (self.checkpoints, *self._stores.values())}.values():
            store.fence()

    def _save(
        self,
        step: int,
        *,
        tag: str | None = None,
        extra: Any = None,
        async_save: bool | None = None,
        weights: list[Any] | None = None,
    ) -> Any:
        from accel.store.async_save import outside_optimizers
        from accel.store.collectives import arrive, named

        if self._sharder is not None:
            # Gathering FSDP's state is collective work: meet before it, not after.
            with named("save_state"):
                arrive("save_state", float(self.workspace.settings.checkpoints.arrival_timeout))
        if self._snapshots is not None:
            self._snapshots.settle()  # one writer at a time; the count's iteration ended
        models, optimizers, sharded = self._state_dicts()
        state = checkpoint_state(
            step,
            models if weights is None else weights,
            optimizers,
            sorted(sharded or ()),
            [s.state_dict() for s in self._schedulers],
            [loader.state_dict() for loader in self._loaders],
            self.scaler.state_dict() if self.scaler is not None else None,
            extra,
            [obj.state_dict() for obj in self._custom_objects],
            self._gradient_state.checkpointed(),
            None if self._snapshots is None else self._snapshots.count,
        )
        with named("save_state"):
            return self.checkpoints.save(
                state,
                step,
                tag=tag,
                async_save=async_save,
                rank_state={"rng": rng_state()},
                sharded=sharded,
                copy_now=outside_optimizers(self._optimizers),
            )

    def _state_dicts(self) -> tuple[list[Any], list[Any], dict[str, Any] | None]:
        """Models' and optimizers' states; what FSDP shards goes into the third part."""
        models = [_ddp.unwrap(m, keep_torch_compile=False) for m in self._models]  # plain keys
        if self._sharder is None:
            optimizers = [o.state_dict() for o in self._optimizers]
            return [m.state_dict() for m in models], optimizers, None
        from accel.accelerator._fsdp.state import save_parts

        return save_parts(models, self._optimizers)

    def load_state(
        self, step: int | str | os.PathLike[str] | None = None, input_dir: Any = None, **_: Any
    ) -> int | None:
        """Restore the latest (or ``step``'s) checkpoint; its step, None when there is none.

        The latest is the newest checkpoint every rank can read (a bad one is warned
        about and skipped, see :mod:`accel.accelerator._resume`); ``step`` is that step or an error.
        A folder ``save_state(folder)`` wrote restores the checkpoint it names.
        """
        step = one_of(step, input_dir=input_dir)  # Accelerate's keyword
        automatic = step is None and self.project_configuration.automatic_checkpoint_naming
        if isinstance(step, (str, os.PathLike)) or automatic:
            return self._load_from_folder(step)
        return self._load(step, [_ddp.unwrap(m, keep_torch_compile=False) for m in self._models])

    def _load(self, step: int | None, models: list[Any]) -> int | None:
        from accel.accelerator import _resume as resume

        if self._snapshots is not None:
            self._snapshots.settle()
        found = resume.agreed_step(self, step)
        if found is None:
            return None

        def sharded(at: int, saved: dict[str, Any]) -> frozenset[str]:
            return self._load_sharded(at, saved, models)

        loaded = resume.load(self, found, sharded, fallback=step is None)
        state, found, restored = loaded.state, loaded.step, loaded.restored
        for kind, objs in (
            ("models", models),
            ("optimizers", self._optimizers),
            ("schedulers", self._schedulers),
        ):
            saved = _matching(state, kind, objs, found)
            for index, (obj, sd) in enumerate(zip(objs, saved, strict=True)):
                if f"{kind[:-1]}.{index}" not in restored:
                    resume.restore(obj, sd, f"{kind[:-1]}.{index}", found)
        for model in self._models:  # every rank's parameters are the checkpoint's now
            _ddp.loaded(model)
        for loader, sd in zip(
            self._loaders, _matching(state, "loaders", self._loaders, found), strict=True
        ):
            loader.load_state_dict(sd)
        customs = _matching(state, "custom", self._custom_objects, found)
        for obj, sd in zip(self._custom_objects, customs, strict=True):
            obj.load_state_dict(sd)
        self._gradient_state.step = int(state.get("accumulation_step") or 0)
        if self._snapshots is not None:  # the count goes on from the checkpoint's
            self._snapshots.count = int(state.get("optimizer_steps") or found)
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.extra_state = state.get("extra")
        if loaded.rank_state is not None:
            set_rng_state(loaded.rank_state["rng"])
        return found

    def _load_sharded(self, step: int, saved: dict[str, Any], models: list[Any]) -> frozenset[str]:
        """Restore what FSDP shards here or in the checkpoint (a collective); their names."""
        if self._sharder is None and not saved.get("sharded"):
            return frozenset()
        from accel.accelerator._fsdp.state import load_parts

        return load_parts(self.checkpoints, step, saved, models, self._optimizers)

    def clean_cache(self, older_than: float | str | None = None) -> list[CacheEntryInfo]:
        """``accel clean --only cache`` on the main process: entries unused for
        ``older_than`` (all when None), a live run's kept (:func:`accel.clean.clean_cache`)."""
        from accel.clean import clean_cache

        removed = clean_cache(self.workspace, older_than) if self.is_main_process else []
        self.wait_for_everyone()
        return removed


def _matching(state: dict[str, Any], kind: str, objs: list[Any], step: int) -> list[Any]:
    saved = list(state.get(kind) or [])
    if len(saved) != len(objs):
        what, did, how = kind, "prepared", "prepare()"
        if kind == "custom":
            what, did, how = "objects", "registered", "register_for_checkpointing()"
        raise UsageError(
            f"the checkpoint of step {step} holds {len(saved)} {what} but {len(objs)} were "
            f"{did}; {how} the same objects as the run that saved it"
        )
    return saved


def _end_at_exit(ref: weakref.ref[Accelerator]) -> None:
    acc = ref()
    if acc is not None:
        acc._end(barrier=False)
