"""Map a Hugging Face Accelerate config onto accel's keys, with Accelerate's meaning (pure).

The import keeps what ``accelerate launch`` would do with the file:

- ``num_processes`` is the job's total, accel's ``launch.num_processes`` is per machine:
  it becomes ``num_processes / num_machines`` (a total that does not divide is refused);
  ``distributed_type: NO`` is one process.
- One machine gets no fixed rendezvous endpoint (accel binds a free port, as Accelerate
  does when its port is taken), so two projects never meet in one store; several
  machines keep ``main_process_ip:main_process_port``.
- ``debug`` and the ``dynamo_config`` details become the worker variables Accelerate
  sets (``ACCELERATE_DEBUG_MODE``, ``ACCELERATE_DYNAMO_*``) in ``launch.env``.
- ``distributed_type: FSDP`` with ``fsdp_version: 2`` becomes ``launch.fsdp`` and its
  details (:mod:`accel.config.hf_fsdp`); every other type sets ``launch.fsdp: false``.
- A config accel cannot run the way Accelerate would (FSDP1 and the FSDP options accel
  lacks, DeepSpeed, Megatron-LM, TPU, SageMaker, accelerators other than CUDA, fp8) is
  refused with a :class:`ConfigError`, never imported as something else.
- Keys Accelerate writes with their defaults, and TPU-only keys, import silently; any
  other value accel does not use is reported in ``notes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accel.config import schema
from accel.config.coerce import shown
from accel.config.hf_fsdp import fsdp_values
from accel.errors import ConfigError

HF_DEFAULT_PORT = 29500  # what `accelerate launch` uses when main_process_port is unset
_DDP_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "FSDP")  # FSDP: DDP's launch, sharded models
_REFUSED_TYPES = {
    "DEEPSPEED": "DeepSpeed training is not supported by accel",
    "MEGATRON_LM": "Megatron-LM training is not supported by accel",
    "XLA": "TPU (XLA) training is not supported by accel",
}
_OTHER_DEVICES = (
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_XPU",
    "MULTI_HPU",
    "MULTI_NEURON",
)
# Keys that never change what accel starts: TPU-only settings, and `same_network`
# (static or c10d rendezvous: accel's c10d covers both).
_IRRELEVANT = frozenset(
    {
        "compute_environment",
        "downcast_bf16",
        "main_training_function",
        "same_network",
        "tpu_env",
        "tpu_name",
        "tpu_zone",
        "tpu_use_cluster",
        "tpu_use_sudo",
        "tpu_vm",
        "commands",
        "command_file",
    }
)
# Sections Accelerate writes empty, or fills for a distributed_type refused above.
_SECTIONS = (
    "deepspeed_config",
    "fsdp_config",
    "megatron_lm_config",
    "fp8_config",
    "ipex_config",
    "mpirun_config",
)
_HANDLED = frozenset(
    {
        "distributed_type",
        "num_processes",
        "num_machines",
        "machine_rank",
        "main_process_ip",
        "main_process_port",
        "rdzv_backend",
        "mixed_precision",
        "fp16",
        "use_cpu",
        "gpu_ids",
        "debug",
        "dynamo_config",
        "dynamo_backend",
        "enable_cpu_affinity",
        "parallelism_config",
    }
)
# Accelerate's torch.compile settings -> the variable its launcher gives each worker.
DYNAMO_ENV = {
    "dynamo_mode": "ACCELERATE_DYNAMO_MODE",
    "dynamo_use_fullgraph": "ACCELERATE_DYNAMO_USE_FULLGRAPH",
    "dynamo_use_dynamic": "ACCELERATE_DYNAMO_USE_DYNAMIC",
    "dynamo_use_regional_compilation": "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION",
}


def worker_env(*, debug: bool, dynamo: Mapping[str, Any]) -> dict[str, str]:
    """The variables Accelerate's launcher gives its workers for ``debug`` and the
    torch.compile settings in ``dynamo`` (keys of :data:`DYNAMO_ENV`; others ignored),
    as Accelerate's own ``Accelerator`` reads them. One rule for a config file being
    imported and for ``accel launch``'s Accelerate flags."""
    env = {DYNAMO_ENV[k]: str(v) for k, v in dynamo.items() if k in DYNAMO_ENV}
    if debug:
        env["ACCELERATE_DEBUG_MODE"] = "true"  # str(True) above: Accelerate's spelling
    return env


@dataclass(frozen=True)
class ImportResult:
    """``values``: accel keys to set (None: remove the key); ``notes``: what was not used."""

    values: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def map_hf_config(data: Mapping[str, Any], source: str = "the config") -> ImportResult:
    """Accel's keys for an Accelerate config; :class:`ConfigError` for one accel cannot run."""
    _refuse_unsupported(data, source)
    values: dict[str, Any] = {}
    notes: list[str] = []
    values.update(_job_shape(data, source, notes))
    values.update(_devices(data, source))
    values.update(fsdp_values(data, source, notes))
    env = _accelerate_env(data, values, source, notes)
    if env:
        values["launch.env"] = env
    notes.extend(_leftovers(data))
    return ImportResult(values, notes)


def _refuse_unsupported(data: Mapping[str, Any], source: str) -> None:
    where = data.get("compute_environment", "LOCAL_MACHINE")
    where = _text(where, "compute_environment", source, "LOCAL_MACHINE")
    if where != "LOCAL_MACHINE":
        raise ConfigError(
            f"{source}: compute_environment {where}: accel launches on this machine only; "
            "start this job with `accelerate launch`"
        )
    if data.get("distributed_type") is None:
        raise ConfigError(f"{source}: no distributed_type: not a Hugging Face Accelerate config")
    kind = _text(data["distributed_type"], "distributed_type", source, "MULTI_GPU")
    if kind in _REFUSED_TYPES:
        raise ConfigError(
            f"{source}: distributed_type {kind}: {_REFUSED_TYPES[kind]}; "
            "launch it with `accelerate launch`, or import a MULTI_GPU/MULTI_CPU config"
        )
    if kind in _OTHER_DEVICES:
        raise ConfigError(
            f"{source}: distributed_type {kind}: accel launches CPU and CUDA workers only; "
            "launch it with `accelerate launch`"
        )
    if kind not in _DDP_TYPES:
        raise ConfigError(f"{source}: unknown distributed_type {kind!r}")
    if data.get("parallelism_config"):
        raise ConfigError(
            f"{source}: parallelism_config (tensor/context parallel sizes) is not supported "
            "by accel; launch it with `accelerate launch`"
        )


def _job_shape(data: Mapping[str, Any], source: str, notes: list[str]) -> dict[str, Any]:
    """Processes per machine, machines, this machine's rank and the endpoint."""
    if data["distributed_type"] == "NO":  # Accelerate starts one plain process
        return _one_machine(1)
    machines = int(
        _checked(_number(data, "num_machines", 1, source), "launch.num_machines", source)
    )
    total = data.get("num_processes")
    per_node: int | None = None
    if total == -1 or total is None:
        notes.append("num_processes: not set in the file (-1); pass -n N when you launch")
    else:
        total = _number(data, "num_processes", 1, source)
        if total % machines:
            raise ConfigError(
                f"{source}: num_processes {total} is the total over num_machines {machines} "
                "and does not divide evenly; make it a multiple of num_machines"
            )
        per_node = int(
            _checked(total // machines, "launch.num_processes", source, "num_processes per machine")
        )
    if machines == 1:
        return _one_machine(per_node)
    return {
        **({"launch.num_processes": per_node} if per_node else {}),
        "launch.num_machines": machines,
        "launch.machine_rank": _machine_rank(data, machines, source),
        "launch.rdzv_endpoint": _endpoint(data, source),
    }


def _text(value: Any, key: str, source: str, example: str) -> str:
    """A value Accelerate writes as a word (MULTI_GPU, inductor): a list or a mapping there
    is a hand edit gone wrong, refused before it is compared, hashed or passed on."""
    if not isinstance(value, str):
        raise ConfigError(f"{source}: {key}: expected a word like {example}, got {shown(value)}")
    return value


def _one_machine(per_node: int | None) -> dict[str, Any]:
    shape: dict[str, Any] = {"launch.num_processes": per_node} if per_node else {}
    # No fixed endpoint: a free port per launch, so two projects never share a store.
    return {
        **shape,
        "launch.num_machines": 1,
        "launch.machine_rank": 0,
        "launch.rdzv_endpoint": None,
    }


def _number(data: Mapping[str, Any], key: str, minimum: int, source: str) -> int:
    value = data.get(key, minimum)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{source}: {key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _machine_rank(data: Mapping[str, Any], machines: int, source: str) -> int:
    rank = _number(data, "machine_rank", 0, source)
    if rank >= machines:
        raise ConfigError(
            f"{source}: machine_rank {rank} is out of range for num_machines {machines}"
        )
    return rank


def _endpoint(data: Mapping[str, Any], source: str) -> str:
    host, port = data.get("main_process_ip"), data.get("main_process_port")
    if not host:
        raise ConfigError(
            f"{source}: num_machines {data['num_machines']} needs main_process_ip "
            "(the address of machine 0)"
        )
    backend = data.get("rdzv_backend") or "static"
    if backend not in ("static", "c10d"):
        raise ConfigError(
            f"{source}: rdzv_backend {backend}: accel's rendezvous is c10d on "
            "main_process_ip:main_process_port; set rdzv_backend to static or c10d"
        )
    host = f"[{host}]" if ":" in str(host) and not str(host).startswith("[") else host
    return str(_checked(f"{host}:{port or HF_DEFAULT_PORT}", "launch.rdzv_endpoint", source))


def _devices(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    precision = data.get("mixed_precision")
    if precision is None and data.get("fp16"):
        precision = "fp16"  # the format before Accelerate 0.8
    if precision is False:  # an unquoted `no` is a YAML boolean
        precision = "no"
    if precision is not None:
        out["launch.mixed_precision"] = _checked(
            str(precision).lower(), "launch.mixed_precision", source, "mixed_precision"
        )
    if data.get("use_cpu") is not None:
        out["launch.use_cpu"] = _checked(data["use_cpu"], "launch.use_cpu", source, "use_cpu")
    if data.get("gpu_ids") is not None:
        out["launch.gpu_ids"] = _checked(data["gpu_ids"], "launch.gpu_ids", source, "gpu_ids")
    return out


def _accelerate_env(
    data: Mapping[str, Any], values: dict[str, Any], source: str, notes: list[str]
) -> dict[str, str]:
    """``debug`` and torch.compile settings: the variables Accelerate gives its workers."""
    dynamo = data.get("dynamo_config") or {}
    if "dynamo_backend" in data:  # the format before Accelerate 0.18
        dynamo = {"dynamo_backend": data["dynamo_backend"]}
    if not isinstance(dynamo, Mapping):
        raise ConfigError(f"{source}: dynamo_config: expected a mapping, got {dynamo!r}")
    # null is Accelerate's "not set", as a missing key
    dynamo = {k: v for k, v in dynamo.items() if v is not None}
    backend = dynamo.get("dynamo_backend", "no")
    backend = _text(backend, "dynamo_config.dynamo_backend", source, "INDUCTOR").lower()
    for key in DYNAMO_ENV.keys() & dynamo.keys():  # a word or a switch, passed on as text
        if not isinstance(dynamo[key], (str, bool, int)):
            raise ConfigError(
                f"{source}: dynamo_config.{key}: expected a word or true/false, "
                f"got {shown(dynamo[key])}"
            )
    if "dynamo_backend" in dynamo:
        values["launch.dynamo_backend"] = _checked(backend, "launch.dynamo_backend", source)
    for key in dynamo:
        if key not in DYNAMO_ENV and key != "dynamo_backend":
            notes.append(f"dynamo_config.{key}: not used by accel")
    return worker_env(debug=data.get("debug") is True, dynamo=dynamo if backend != "no" else {})


def _checked(value: Any, key: str, source: str, hf_key: str | None = None) -> Any:
    return schema.imported(key, value, f"{source}: {hf_key or key}")


def _leftovers(data: Mapping[str, Any]) -> list[str]:
    """Notes for values the import does not use (defaults and TPU-only keys are silent)."""
    notes = []
    kind = data["distributed_type"]
    for key, value in data.items():
        if key in _HANDLED or key in _IRRELEVANT or (key in _SECTIONS and not value):
            continue
        if key == "fsdp_config" and kind == "FSDP":
            continue  # read by accel.config.hf_fsdp
        if key == "mpirun_config":
            notes.append(
                "mpirun_config: not used: accel does not start the other machines; run "
                "`accel launch` on each of them (see docs/commands/launch.md, multi-node)"
            )
        elif key in _SECTIONS:
            notes.append(f"{key}: ignored, as Accelerate ignores it for distributed_type {kind}")
        else:
            notes.append(f"{key}: not a Hugging Face Accelerate key accel knows; ignored")
    if data.get("enable_cpu_affinity") is True:
        notes.append("enable_cpu_affinity: not used: accel does not pin workers to NUMA nodes")
    return notes
