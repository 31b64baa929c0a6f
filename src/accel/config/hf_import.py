"""Map a Hugging Face Accelerate ``default_config.yaml`` onto accel's keys (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accel.config import schema

# HF keys that carry no meaning for accel's launcher (defaults, TPU, SageMaker, ...).
_IGNORED_WHEN_DEFAULT = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "downcast_bf16": "no",
    "main_training_function": "main",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "enable_cpu_affinity": False,
}
_DIRECT = {
    "num_processes": "launch.num_processes",
    "num_machines": "launch.num_machines",
    "machine_rank": "launch.machine_rank",
    "mixed_precision": "launch.mixed_precision",
    "use_cpu": "launch.use_cpu",
    "gpu_ids": "launch.gpu_ids",
}


@dataclass(frozen=True)
class ImportResult:
    values: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what was not mapped, and why


def map_hf_config(data: dict[str, Any]) -> ImportResult:
    values: dict[str, Any] = {}
    notes: list[str] = []
    for hf_key, key in _DIRECT.items():
        if data.get(hf_key) is not None:
            _put(values, notes, hf_key, key, data[hf_key])
    _map_endpoint(data, values, notes)
    _map_rdzv_backend(data, notes)
    _map_dynamo(data, values, notes)
    handled = set(_DIRECT) | {
        "main_process_ip",
        "main_process_port",
        "rdzv_backend",
        "dynamo_config",
        "distributed_type",
    }
    for hf_key, value in data.items():
        if hf_key in handled or _IGNORED_WHEN_DEFAULT.get(hf_key, object()) == value:
            continue
        notes.append(f"{hf_key}: not mapped (accel has no equivalent)")
    _check_distributed_type(data, notes)
    return ImportResult(values, notes)


def _put(values: dict[str, Any], notes: list[str], hf_key: str, key: str, raw: Any) -> None:
    f = schema.BY_KEY[key]
    try:
        values[key] = schema.parse_text(f, raw) if isinstance(raw, str) else schema.coerce(f, raw)
    except ValueError as exc:
        notes.append(f"{hf_key}: not mapped ({exc})")


def _map_endpoint(data: dict[str, Any], values: dict[str, Any], notes: list[str]) -> None:
    host, port = data.get("main_process_ip"), data.get("main_process_port")
    if host is None and port is None:
        return
    if host is None:
        notes.append(f"main_process_port: not mapped ({port} without main_process_ip)")
        return
    endpoint = f"{host}:{port}" if port is not None else str(host)
    _put(values, notes, "main_process_ip", "launch.rdzv_endpoint", endpoint)


def _map_rdzv_backend(data: dict[str, Any], notes: list[str]) -> None:
    backend = data.get("rdzv_backend")
    if backend not in (None, "static", "c10d"):
        notes.append(f"rdzv_backend: {backend!r} not mapped (accel uses c10d rendezvous)")


def _map_dynamo(data: dict[str, Any], values: dict[str, Any], notes: list[str]) -> None:
    dynamo = data.get("dynamo_config") or {}
    if not isinstance(dynamo, dict):
        notes.append("dynamo_config: not mapped (expected a mapping)")
        return
    backend = dynamo.get("dynamo_backend")
    if backend is not None:
        _put(
            values,
            notes,
            "dynamo_config.dynamo_backend",
            "launch.dynamo_backend",
            str(backend).lower(),
        )
    for extra in sorted(set(dynamo) - {"dynamo_backend"}):
        notes.append(f"dynamo_config.{extra}: not mapped")


def _check_distributed_type(data: dict[str, Any], notes: list[str]) -> None:
    kind = data.get("distributed_type")
    if kind in (None, "NO", "MULTI_GPU", "MULTI_CPU"):
        return
    notes.append(f"distributed_type: {kind} not mapped (accel launches plain DDP workers)")
