"""Hugging Face Accelerate's constructor arguments, read into accel's terms.

A script ported from Accelerate keeps passing its ``Accelerator`` the objects it
imports from ``accelerate.utils`` (``DataLoaderConfiguration``, ``ProjectConfiguration``,
``DistributedDataParallelKwargs``, ...). They are read by their attributes (and
``to_kwargs()``), so accel needs no import of ``accelerate``; accel's own
:class:`ProjectConfiguration` and :class:`DataLoaderConfiguration` serve scripts that
do not have it. What accel does not offer (DeepSpeed, Megatron-LM, tensor parallelism,
fp8 recipes, dispatched or stateful loaders) is refused at construction, in one line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from accel.errors import UsageError

#: Constructor arguments only Accelerate has: passing any of them asks for its semantics.
HF_ARGUMENTS = (
    "device_placement",
    "split_batches",
    "gradient_accumulation_steps",
    "dataloader_config",
    "rng_types",
    "log_with",
    "project_dir",
    "project_config",
    "gradient_accumulation_plugin",
    "step_scheduler_with_optimizer",
    "kwargs_handlers",
    "dynamo_backend",
    "dynamo_plugin",
    "deepspeed_plugin",
    "deepspeed_plugins",
    "fsdp_plugin",
    "megatron_lm_plugin",
    "torch_tp_plugin",
    "parallelism_config",
)

_REFUSED = {
    "deepspeed_plugin": "DeepSpeed",
    "deepspeed_plugins": "DeepSpeed",
    "megatron_lm_plugin": "Megatron-LM",
    "torch_tp_plugin": "tensor parallelism",
    "parallelism_config": "composable parallelism (tensor, context, pipeline)",
}


class DistributedType(str, enum.Enum):
    """Accelerate's names for the kinds of run (equal to Accelerate's own
    ``DistributedType`` members: both are strings). accel is one of the first four; the
    others are there so a ported script's checks (``== DistributedType.XLA``) still read."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    FSDP = "FSDP"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


@dataclass
class ProjectConfiguration:
    """Accelerate's ``ProjectConfiguration``: where ``save_state()`` without a folder and
    the trackers write."""

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)

    def set_directories(self, project_dir: str | None = None) -> None:
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir


@dataclass
class DataLoaderConfiguration:
    """Accelerate's ``DataLoaderConfiguration`` (the options accel honours)."""

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class Handlers:
    """What the ``kwargs_handlers`` ask for, by the call they configure."""

    ddp: dict[str, Any] = field(default_factory=dict)
    scaler: dict[str, Any] = field(default_factory=dict)
    process_group: dict[str, Any] = field(default_factory=dict)
    autocast: dict[str, Any] = field(default_factory=dict)
    profile: Any = None


_DDP_OPTIONS = frozenset(
    {
        "dim",
        "broadcast_buffers",
        "bucket_cap_mb",
        "find_unused_parameters",
        "check_reduction",
        "gradient_as_bucket_view",
        "static_graph",
    }
)


def refuse_unsupported(given: dict[str, Any]) -> None:
    """One line for the first argument that asks for what accel does not do."""
    for name, what in _REFUSED.items():
        if given.get(name) is not None:
            raise UsageError(
                f"Accelerator({name}=...): accel does not run {what}; train with DDP or FSDP "
                "(accel launch --fsdp), or keep using Hugging Face Accelerate for this script"
            )
    if given.get("fsdp_plugin") is not None:
        raise UsageError(
            "Accelerator(fsdp_plugin=...): accel configures FSDP2 itself; pass fsdp=True, or "
            "set it with accel launch --fsdp / launch.fsdp_* (see docs/worker-api.md#fsdp)"
        )


def dataloader_options(config: Any) -> DataLoaderConfiguration:
    """The loader options, from ``dataloader_config``. (Accelerate 1.x keeps the
    constructor's ``split_batches`` in its signature only, and ignores it: so does accel.)"""
    if config is None:
        config = DataLoaderConfiguration()
    read = DataLoaderConfiguration(
        **{
            name: getattr(config, name, default)
            for name, default in vars(DataLoaderConfiguration()).items()
        }
    )
    if read.dispatch_batches:
        raise UsageError(
            "dataloader_config: dispatch_batches=True is not supported: accel shards map-style "
            "datasets on every rank (leave dispatch_batches unset)"
        )
    if read.use_stateful_dataloader:
        raise UsageError(
            "dataloader_config: use_stateful_dataloader is not supported: accel's checkpoints "
            "resume loaders themselves (save_state records the epoch and its order)"
        )
    return read


def project_options(project_dir: Any, config: Any) -> ProjectConfiguration:
    """``project_config`` (any object with its attributes), ``project_dir`` overriding."""
    if config is None:
        config = ProjectConfiguration()
    read = ProjectConfiguration(
        **{name: getattr(config, name, default) for name, default in _project_defaults()}
    )
    if project_dir is not None:
        read.set_directories(str(project_dir))
    return read


def _project_defaults() -> list[tuple[str, Any]]:
    return list(vars(ProjectConfiguration()).items())


def handlers(objects: Any) -> Handlers:
    """Sort ``kwargs_handlers`` by class name (Accelerate's ``*Kwargs`` dataclasses);
    an unknown or duplicated one is refused, as Accelerate refuses it."""
    out = Handlers()
    seen: set[str] = set()
    for handler in objects or ():
        name = type(handler).__name__
        if name in seen:
            raise UsageError(f"kwargs_handlers: {name} was passed twice; pass each kind once")
        seen.add(name)
        options = _to_kwargs(handler)
        if name == "DistributedDataParallelKwargs":
            out.ddp = _ddp_options(options)
        elif name == "GradScalerKwargs":
            out.scaler = options
        elif name == "InitProcessGroupKwargs":
            out.process_group = options
        elif name == "AutocastKwargs":
            out.autocast = options
        elif name == "ProfileKwargs":
            out.profile = handler
        elif name.endswith("RecipeKwargs"):
            raise UsageError(
                f"kwargs_handlers: {name} configures fp8 training, which accel does not run; "
                "use mixed_precision='bf16' or 'fp16'"
            )
        else:
            raise UsageError(
                f"kwargs_handlers: {name} is not one accel knows; it takes "
                "DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs, "
                "AutocastKwargs and ProfileKwargs"
            )
    return out


def _to_kwargs(handler: Any) -> dict[str, Any]:
    to_kwargs = getattr(handler, "to_kwargs", None)
    return dict(to_kwargs()) if callable(to_kwargs) else dict(vars(handler))


def _ddp_options(options: dict[str, Any]) -> dict[str, Any]:
    hooks = sorted(k for k in options if k.startswith("comm_"))
    if hooks:
        raise UsageError(
            f"DistributedDataParallelKwargs: {', '.join(hooks)} (DDP communication hooks) are "
            "not supported by accel; register the hook on the prepared model yourself"
        )
    unknown = sorted(set(options) - _DDP_OPTIONS)
    if unknown:
        raise UsageError(f"DistributedDataParallelKwargs: {', '.join(unknown)} is not supported")
    return options


def rng_kinds(rng_types: Any) -> tuple[str, ...]:
    """Accelerate's ``rng_types`` (strings or ``RNGType`` members); default the generator."""
    if rng_types is None:
        return ("generator",)
    kinds = tuple(str(getattr(kind, "value", kind)).lower() for kind in rng_types)
    unknown = [kind for kind in kinds if kind not in ("torch", "cuda", "generator")]
    if unknown:
        raise UsageError(f"rng_types: {', '.join(unknown)} is not one of torch, cuda, generator")
    return kinds


def dynamo_backend(backend: Any, plugin: Any, env: dict[str, str]) -> str | None:
    """The ``torch.compile`` backend a prepared model gets; None when it is not compiled."""
    chosen = backend if backend is not None else getattr(plugin, "backend", None)
    if chosen is None:
        chosen = env.get("ACCELERATE_DYNAMO_BACKEND")
    name = str(getattr(chosen, "value", chosen) or "no").lower()
    return None if name == "no" else name
