"""The part of Hugging Face Accelerate's ``Accelerator`` API that is about processes:
who is where, collectives, running code on some ranks only, gradient accumulation,
trackers, profiling and memory. :class:`accel.Accelerator` inherits it; each call
behaves as Accelerate's does (``accelerate/accelerator.py``, ``state.py``,
``utils/operations.py``), and what it names is in docs/worker-api.md's table.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accel.accelerator import _ops as ops
from accel.accelerator._hfargs import DistributedType
from accel.errors import UsageError

if TYPE_CHECKING:
    from accel.accelerator._accumulate import GradientState
    from accel.accelerator._hfargs import Handlers, ProjectConfiguration


@dataclass(frozen=True)
class State:
    """What Accelerate's ``AcceleratorState`` tells about this process."""

    num_processes: int
    process_index: int
    local_process_index: int
    device: Any
    distributed_type: DistributedType
    mixed_precision: str
    backend: str | None

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def use_distributed(self) -> bool:
        return self.distributed_type != DistributedType.NO


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


class ProcessApi:
    """Accelerate's calls about processes, collectives, accumulation and trackers."""

    rank: int
    local_rank: int
    world_size: int
    device: Any
    mixed_precision: str
    fsdp: Any
    project_configuration: ProjectConfiguration
    _gradient_state: GradientState
    _handlers: Handlers
    _hf_data: Any
    _trackers_wanted: list[Any]
    trackers: list[Any]
    _models: list[Any]
    _optimizers: list[Any]
    _schedulers: list[Any]
    _loaders: list[Any]

    scaler: Any

    if TYPE_CHECKING:  # the Accelerator's own

        def wait_for_everyone(self) -> None: ...
        def end(self) -> None: ...
        def _prepare_one(self, obj: Any) -> Any: ...
        def _prepare_model(self, model: Any, evaluation_mode: bool = False) -> Any: ...

    # -- where this process is --------------------------------------------------------

    @property
    def num_processes(self) -> int:
        return self.world_size

    @property
    def process_index(self) -> int:
        return self.rank

    @property
    def local_process_index(self) -> int:
        return self.local_rank

    @property
    def is_last_process(self) -> bool:
        return self.rank == self.world_size - 1

    @property
    def distributed_type(self) -> DistributedType:
        if self.world_size == 1:
            return DistributedType.NO
        if self.fsdp is not None:
            return DistributedType.FSDP
        return (
            DistributedType.MULTI_GPU if self.device.type == "cuda" else DistributedType.MULTI_CPU
        )

    @property
    def use_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def multi_device(self) -> bool:
        """Several GPUs, one a rank (Accelerate's meaning: not CPU ranks, not FSDP)."""
        return self.distributed_type == DistributedType.MULTI_GPU

    @property
    def state(self) -> State:
        import torch.distributed as dist

        backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
        return State(
            self.world_size,
            self.rank,
            self.local_rank,
            self.device,
            self.distributed_type,
            self.mixed_precision,
            backend,
        )

    @property
    def split_batches(self) -> bool:
        return bool(self._hf_data.split_batches)

    @property
    def even_batches(self) -> bool:
        return bool(self._hf_data.even_batches)

    @even_batches.setter
    def even_batches(self, value: bool) -> None:  # for loaders prepared from now on
        self._hf_data.even_batches = bool(value)

    @property
    def use_seedable_sampler(self) -> bool:
        return bool(self._hf_data.seedable)

    @property
    def non_blocking(self) -> bool:
        return bool(self._hf_data.non_blocking)

    def set_trigger(self) -> None:
        """Raise this rank's flag; ``check_trigger()`` on every rank then says True."""
        import torch

        self._trigger = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """Whether any rank called ``set_trigger()`` since the last True (a collective)."""
        import torch

        flag = getattr(self, "_trigger", None)
        if flag is None:
            flag = torch.tensor(0, device=self.device)
        if int(ops.reduce(flag).item()) >= 1:
            self._trigger = torch.tensor(0, device=self.device)
            return True
        self._trigger = flag
        return False

    def prepare_model(
        self, model: Any, device_placement: Any = None, evaluation_mode: bool = False
    ) -> Any:
        return self._prepare_model(model, evaluation_mode=evaluation_mode)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process of each node (Accelerate's: once per node)."""
        if self.local_rank == 0:
            builtins.print(*args, **kwargs)

    def prepare_optimizer(self, optimizer: Any, device_placement: Any = None) -> Any:
        return self._prepare_one(optimizer)

    def prepare_scheduler(self, scheduler: Any) -> Any:
        return self._prepare_one(scheduler)

    def prepare_data_loader(self, data_loader: Any, device_placement: Any = None, **kw: Any) -> Any:
        return self._prepare_one(data_loader)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """With fp16, unscale the gradients of ``optimizer`` (else of every prepared one)."""
        if self.scaler is None:
            return
        for each in [optimizer] if optimizer is not None else self._optimizers:
            self.scaler.unscale_(each)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        import torch

        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # -- collectives ------------------------------------------------------------------

    def _in_group(self) -> None:
        """A collective of a run of several ranks needs its group: after ``end()`` (or
        another Accelerator's) each rank had silently got back its own data alone."""
        import torch.distributed as dist

        if self.world_size > 1 and not dist.is_initialized():
            raise UsageError(
                "this run's process group has ended (end() or end_training() was called): "
                "gather, reduce and the other collectives come before it"
            )

    def gather(self, tensor: Any) -> Any:
        """Every rank's tensors concatenated along dimension 0 (a collective)."""
        self._in_group()
        return ops.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """``gather``, less the samples the last batch repeated to even the ranks out."""
        self._in_group()
        use_object = use_gather_object or not ops.all_tensors(input_data)
        data = ops.gather_object(input_data) if use_object else ops.gather(input_data)
        state = self._gradient_state
        if not state.end_of_dataloader or state.remainder <= 0:
            return data
        if use_object:
            return data[: state.remainder]
        return ops.apply(lambda t: t[: state.remainder], data)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """The sum (``mean``, ``max``) over the ranks, on every rank (``scale`` is XLA's
        alone in Accelerate, and ignored here as there)."""
        self._in_group()
        return ops.reduce(tensor, reduction)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False
    ) -> Any:
        self._in_group()
        return ops.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """This rank's contiguous share of ``inputs`` (the first ranks take one more)."""
        yield ops.split_rows(inputs, self.rank, self.world_size, apply_padding, self.device)

    # -- code for some ranks ----------------------------------------------------------

    @contextlib.contextmanager
    def main_process_first(self) -> Iterator[None]:
        yield from self._goes_first(self.rank == 0)

    @contextlib.contextmanager
    def local_main_process_first(self) -> Iterator[None]:
        yield from self._goes_first(self.local_rank == 0)

    def _goes_first(self, first: bool) -> Iterator[None]:
        if not first:
            self.wait_for_everyone()
        yield
        if first:
            self.wait_for_everyone()

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        return self._only_where(function, self.rank == 0, "on_main_process")

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        return self._only_where(function, self.local_rank == 0, "on_local_main_process")

    def on_last_process(self, function: Callable[..., Any]) -> Any:
        return self._only_where(function, self.is_last_process, "on_last_process")

    def on_process(
        self, function: Callable[..., Any] | None = None, process_index: int | None = None
    ) -> Any:
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return self._only_where(function, self.rank == process_index, "on_process")

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_where(
            function, self.local_rank == local_process_index, "on_local_process"
        )

    def _only_where(self, function: Callable[..., Any] | None, here: bool, name: str) -> Any:
        if function is None:
            raise UsageError(f"{name} decorates a function: use @accelerator.{name}")
        if self.world_size == 1 or here:
            return function
        return functools.wraps(function)(_nothing)

    # -- gradient accumulation --------------------------------------------------------

    @property
    def sync_gradients(self) -> bool:
        return bool(self._gradient_state.sync_gradients)

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self._gradient_state.sync_gradients = bool(value)

    @property
    def gradient_accumulation_steps(self) -> int:
        return self._gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self._gradient_state.options["num_steps"] = int(steps)

    @property
    def step(self) -> int:
        return self._gradient_state.step

    @step.setter
    def step(self, value: int) -> None:
        self._gradient_state.step = int(value)

    @property
    def gradient_state(self) -> GradientState:
        return self._gradient_state

    @contextlib.contextmanager
    def accumulate(self, *models: Any) -> Iterator[None]:
        """One micro-step: gradients sync (and prepared optimizers step) every
        ``gradient_accumulation_steps``-th time and at the end of a prepared loader."""
        state = self._gradient_state
        state.advance()
        sync = state.sync_gradients or (
            self.world_size > 1 and bool(state.options.get("sync_each_batch", False))
        )
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(contextlib.nullcontext() if sync else self.no_sync(model))
            yield

    @contextlib.contextmanager
    def no_sync(self, model: Any) -> Iterator[None]:
        """Gradients of ``model`` stay local (DDP's ``no_sync``; FSDP2's gradient sync off)."""
        if self.world_size > 1 and hasattr(model, "set_requires_gradient_sync"):
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)
            return
        context = getattr(model, "no_sync", None) if self.world_size > 1 else None
        with context() if context is not None else contextlib.nullcontext():
            yield

    @staticmethod
    @contextlib.contextmanager
    def trigger_sync_in_backward(model: Any) -> Iterator[None]:
        """Inside ``no_sync``: make this backward all-reduce after all (DDP only)."""
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(model, DistributedDataParallel):
            yield
            return
        old = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = model.require_forward_param_sync = True
        model.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = old

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether fp16's scaler skipped the last optimizer step (inf/NaN gradients)."""
        return any(bool(getattr(o, "accel_step_was_skipped", False)) for o in self._optimizers)

    # -- trackers ---------------------------------------------------------------------

    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """Start the ``log_with`` trackers (main process only), storing ``config``."""
        if self.rank != 0:
            return
        from accel.accelerator import _trackers as trackers

        logging_dir = self.project_configuration.logging_dir
        self.trackers = trackers.start(
            self._trackers_wanted, project_name, logging_dir, config, init_kwargs
        )

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        for tracker in self.trackers:
            if tracker.name == name:
                return getattr(tracker, "tracker", tracker) if unwrap else tracker
        if self.trackers:
            raise UsageError(f"{name} is not one of this Accelerator's trackers")
        return _BlankTracker()

    def end_training(self) -> None:
        """Close the trackers, then ``end()`` (saves, barrier, the process group)."""
        for tracker in self.trackers:
            tracker.finish()
        self.end()

    @contextlib.contextmanager
    def join_uneven_inputs(
        self, joinables: Any, even_batches: bool | None = None
    ) -> Iterator[None]:
        """torch's ``Join`` over ``joinables`` when batches are uneven across ranks;
        ``even_batches`` overrides the prepared loaders' setting inside the block. Only
        on GPU ranks (``multi_device``), as in Accelerate: elsewhere it has no effect."""
        if not self.multi_device:
            yield
            return
        from torch.distributed.algorithms.join import Join

        found: list[Any] = [getattr(dl.loader, "batch_sampler", None) for dl in self._loaders]
        shards = [s for s in found if hasattr(s, "even_batches")]
        before = [s.even_batches for s in shards]
        if even_batches is None:
            even_batches = self.even_batches
        for shard in shards:
            shard.even_batches = even_batches
        try:
            with Join(joinables, enable=not even_batches, throw_on_early_termination=False):
                yield
        finally:
            for shard, value in zip(shards, before, strict=True):
                shard.even_batches = value

    # -- what accel does not run (Accelerate's answers when it is not configured) -------

    deepspeed_plugin = None
    parallelism_config = None
    torch_device_mesh = None

    @property
    def is_fsdp2(self) -> bool:
        return self.fsdp is not None and self.world_size > 1

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        return self.is_fsdp2

    @property
    def should_save_model(self) -> bool:
        return self.local_rank == 0

    @property
    def dispatch_batches(self) -> bool | None:
        return None  # dispatch_batches=True is refused at construction

    @property
    def use_stateful_dataloader(self) -> bool:
        return False  # refused at construction

    @property
    def tensor_parallel_rank(self) -> int:
        raise UsageError("accel does not run tensor parallelism: there is no tensor_parallel_rank")

    @property
    def pipeline_parallel_rank(self) -> int:
        raise UsageError("accel does not run pipeline parallelism: no pipeline_parallel_rank")

    @property
    def context_parallel_rank(self) -> int:
        raise UsageError("accel does not run context parallelism: no context_parallel_rank")

    @property
    def data_parallel_rank(self) -> int:
        raise UsageError("data_parallel_rank belongs to a parallelism_config; use process_index")

    @property
    def data_parallel_shard_rank(self) -> int:
        raise UsageError("data_parallel_shard_rank needs a parallelism_config; use process_index")

    @contextlib.contextmanager
    def maybe_context_parallel(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        """No effect: context parallelism is not enabled (as in Accelerate without it)."""
        yield

    @staticmethod
    def verify_device_map(model: Any) -> bool:
        """Whether ``model`` was loaded spread over devices (``hf_device_map``)."""
        return any(len(getattr(m, "hf_device_map", {})) > 1 for m in model.modules())

    def lomo_backward(self, loss: Any, learning_rate: float) -> None:
        raise UsageError("lomo_backward: accel does not run LOMO optimizers; use backward()")

    @property
    def fp8_backend(self) -> str:
        """``"NO"``: accel trains in fp32, fp16 or bf16 (fp8 recipes are refused)."""
        return "NO"

    def deepspeed_ulysses_dl_adapter(self, dl: Any, model: Any) -> Any:
        raise UsageError("deepspeed_ulysses_dl_adapter: accel does not run DeepSpeed")

    # -- profiling and memory ---------------------------------------------------------

    @contextlib.contextmanager
    def profile(self, profile_handler: Any = None) -> Iterator[Any]:
        """``torch.profiler.profile`` as a ``ProfileKwargs`` describes it; with its
        ``output_trace_dir``, each rank's chrome trace goes to ``profile_<rank>.json``."""
        import torch

        handler = profile_handler or self._handlers.profile
        build = getattr(handler, "build", None)
        with build() if callable(build) else torch.profiler.profile() as profiler:
            yield profiler
        folder = getattr(handler, "output_trace_dir", None)
        if folder is None:
            return
        os.makedirs(folder, exist_ok=True)
        profiler.export_chrome_trace(os.path.join(folder, f"profile_{self.rank}.json"))
        self.wait_for_everyone()

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget every prepared object (and reset ``step``); collect garbage and empty
        the device cache. Returns ``objects`` as Nones: ``a, b = acc.free_memory(a, b)``."""
        import gc

        import torch

        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._loaders.clear()
        self._gradient_state.step = 0
        released: list[Any] = [None] * len(objects)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return released

    def clear(self, *objects: Any) -> list[Any]:
        return self.free_memory(*objects)

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """``dataloader`` starting its next iteration at batch ``num_batches``."""
        from accel.accelerator._hfdata import skip_first

        return skip_first(dataloader, num_batches)


class _BlankTracker:
    """What Accelerate's ``get_tracker`` gives off the main process (its blank
    ``GeneralTracker``): its calls do nothing; it has no ``name``."""

    main_process_only = True
    start = store_init_configuration = log = finish = staticmethod(_nothing)
