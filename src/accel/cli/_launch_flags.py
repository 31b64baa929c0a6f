"""The launch flags people already type: torchrun's and Hugging Face Accelerate's.

Most are accel's own options under another spelling (``--nproc_per_node``,
``--machine_rank``, ...), declared as aliases in :mod:`accel.cli.launch`. The ones
whose meaning differs are translated here (pure), so a torchrun or ``accelerate
launch`` command line means under ``accel launch`` what it meant before:

- ``--num_processes`` / ``--num-processes`` is Accelerate's total over all nodes;
  ``-n`` / ``--nproc-per-node`` is torchrun's count per node.
- ``--nproc-per-node cpu`` is the number of CPUs, ``gpu`` one worker per visible GPU
  (refused where none is visible), as torchrun counts them.
- ``--nnodes MIN:MAX`` is torchrun's elastic range: ``launch.min_machines`` and
  ``launch.num_machines`` (``N:N`` and ``N`` are a fixed size).
- ``--master_addr/--master_port`` and ``--main_process_ip/--main_process_port`` name
  node 0 of a multi-node job; on one node accel binds a free port (like
  ``--standalone``), so two jobs on one machine never meet in one store.
- ``--config_file`` reads a Hugging Face config as ``accel config import`` does, for
  this launch only; flags on the command line still win.
- ``--use_fsdp`` is ``--fsdp``; ``--fsdp_auto_wrap_policy`` takes Accelerate's names
  (``TRANSFORMER_BASED_WRAP``, ...) as well as accel's; ``--fsdp_version`` other than 2
  is refused (accel shards with FSDP2 only).

torchrun's flags that are not accel's options under another name are in
:mod:`accel.cli._launch_torchrun`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.config import schema
from accel.errors import UsageError

DEFAULT_MASTER = ("127.0.0.1", 29500)  # torchrun's and Accelerate's defaults
_FLAG_KEYS = {
    "nproc_per_node": "launch.num_processes",
    "nnodes": "launch.num_machines",
    "node_rank": "launch.machine_rank",
    "rdzv_endpoint": "launch.rdzv_endpoint",
    "rdzv_id": "launch.rdzv_id",
    "max_restarts": "launch.max_restarts",
    "mixed_precision": "launch.mixed_precision",
    "gpu_ids": "launch.gpu_ids",
    "dynamo_backend": "launch.dynamo_backend",
    "run_name": "launch.run_name",
    "grace": "launch.stop_grace_period",
    "hang_timeout": "launch.hang_timeout",
    "hang_action": "launch.hang_action",
    "fsdp": "launch.fsdp",
    "fsdp_wrap": "launch.fsdp_wrap",
    "fsdp_layer_classes": "launch.fsdp_layer_classes",
    "fsdp_min_params": "launch.fsdp_min_params",
    "fsdp_reshard_after_forward": "launch.fsdp_reshard_after_forward",
}


@dataclass(frozen=True)
class LaunchFlags:
    """Config flags (key -> value, as typed) and what goes into the LaunchRequest."""

    flags: dict[str, Any]
    total_processes: str | None = None
    multi_gpu: bool = False
    main_endpoint: str | None = None
    file_env: dict[str, str] = field(default_factory=dict)  # launch.env of --config_file
    notes: list[str] = field(default_factory=list)  # what --config_file did not use


def translate(params: Mapping[str, Any]) -> LaunchFlags:
    """The parsed options of ``accel launch`` -> :class:`LaunchFlags`; UsageError if bad."""
    _refuse(params)
    file_values, file_env, notes = _config_file(params.get("config_file"))
    flags = {**file_values, **_explicit(params)}
    if params.get("standalone"):
        flags.update(_standalone(flags))
    return LaunchFlags(
        flags=flags,
        total_processes=_total(params),
        multi_gpu=bool(params.get("multi_gpu")),
        main_endpoint=_main_endpoint(
            params.get("master_addr") or params.get("main_process_ip"),
            params.get("master_port") or params.get("main_process_port"),
        ),
        file_env=file_env,
        notes=notes,
    )


def _refuse(params: Mapping[str, Any]) -> None:
    version = params.get("fsdp_version")
    if version is not None and str(version).strip() != "2":
        raise UsageError(
            f"--fsdp-version {version}: accel shards with FSDP2 (fully_shard) only; "
            "give --fsdp-version 2 or drop the flag"
        )
    interval = params.get("monitor_interval")
    if interval is not None and interval < 0:
        raise UsageError(f"invalid value for --monitor-interval: expected >= 0, got {interval}")
    backend = params.get("rdzv_backend")
    if backend is not None and backend not in ("c10d", "static"):
        raise UsageError(
            f"--rdzv-backend {backend}: accel's rendezvous is c10d, hosted by node 0 "
            "(no etcd needed); drop the flag and give --rdzv-endpoint HOST:PORT of node 0"
        )


# Accelerate's names of accel's options: the same option, accel's spelling wins.
_HF_ALIASES = {
    "use_fsdp": "fsdp",
    "fsdp_auto_wrap_policy": "fsdp_wrap",
    "fsdp_transformer_layer_cls_to_wrap": "fsdp_layer_classes",
    "fsdp_min_num_params": "fsdp_min_params",
}


def _explicit(params: Mapping[str, Any]) -> dict[str, Any]:
    params = {**params}
    for alias, name in _HF_ALIASES.items():
        if not params.get(name) and params.get(alias):
            params[name] = params[alias]
    flags = {key: params.get(name) for name, key in _FLAG_KEYS.items()}
    flags["launch.fsdp"] = _on_off(params, "fsdp")
    flags["launch.preload"] = _on_off(params, "preload")
    if flags["launch.num_processes"] is not None:
        flags["launch.num_processes"] = _per_node(str(flags["launch.num_processes"]))
    if flags["launch.num_machines"] is not None:
        low, high = _nnodes(str(flags["launch.num_machines"]))
        flags["launch.num_machines"], flags["launch.min_machines"] = high, low
    if flags["launch.dynamo_backend"] is not None:
        flags["launch.dynamo_backend"] = str(flags["launch.dynamo_backend"]).lower()
    if flags["launch.fsdp_wrap"] is not None:
        flags["launch.fsdp_wrap"] = _wrap(str(flags["launch.fsdp_wrap"]))
    flags["launch.use_cpu"] = True if params.get("cpu") else None
    return {key: value for key, value in flags.items() if value is not None}


DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune")  # Accelerate's choices


def accelerate_env(params: Mapping[str, Any]) -> dict[str, str]:
    """The variables ``accelerate launch`` sets for its flags, for the workers (an
    ``--env`` of the same name wins): ``--num_cpu_threads_per_process`` is each worker's
    OMP_NUM_THREADS; the dynamo family and ``--debug`` are read by Accelerate's own
    ``Accelerator`` in the script (:func:`accel.config.hf_import.worker_env`)."""
    from accel.config.hf_import import DYNAMO_ENV, worker_env

    out: dict[str, str] = {}
    if params.get("num_cpu_threads_per_process") is not None:
        out["OMP_NUM_THREADS"] = str(params["num_cpu_threads_per_process"])
    mode = params.get("dynamo_mode")
    if mode is not None and mode not in DYNAMO_MODES:
        raise UsageError(
            f"invalid value for --dynamo-mode: expected one of {', '.join(DYNAMO_MODES)}, "
            f"got {mode!r}"
        )
    switches = [key for key in DYNAMO_ENV if key != "dynamo_mode"]
    dynamo: dict[str, Any] = {}
    if mode is not None or any(params.get(key) for key in switches):
        # accelerate launch sets them all: the mode ("default" unless given) and each switch,
        # but dynamic shapes only when asked: unset, torch.compile keeps its own default
        # (dynamic after the first recompilation; Accelerate 1.16, where 1.15 forced False)
        dynamo = {"dynamo_mode": mode or "default", **{k: bool(params.get(k)) for k in switches}}
        if not dynamo["dynamo_use_dynamic"]:
            del dynamo["dynamo_use_dynamic"]
    return {**out, **worker_env(debug=bool(params.get("debug")), dynamo=dynamo)}


def _on_off(params: Mapping[str, Any], name: str) -> bool | None:
    """``--NAME`` on, ``--no-NAME`` off, else unset (the config decides)."""
    on, off = bool(params.get(name)), bool(params.get(f"no_{name}"))
    if on and off:
        raise UsageError(f"give --{name} or --no-{name}, not both")
    return True if on else False if off else None


def _wrap(text: str) -> str:
    """``--fsdp-wrap`` in accel's words, or Accelerate's (TRANSFORMER_BASED_WRAP, ...)."""
    from accel.config.hf_fsdp import wrap_name

    try:
        return wrap_name(text)
    except ValueError as exc:
        raise UsageError(f"invalid value for --fsdp-wrap: {exc}") from None


def _per_node(text: str) -> Any:
    from accel.config.resolve import flag_value

    text = _torchrun_count(text)
    try:
        return flag_value("launch.num_processes", text)
    except UsageError:
        expected = schema.BY_KEY["launch.num_processes"].expected
        raise UsageError(
            f"invalid value for -n/--nproc-per-node: expected {expected}, got {text!r}"
        ) from None


def _torchrun_count(text: str) -> str:
    """torchrun's ``cpu`` and ``gpu`` counts in accel's words (a number, or ``auto``)."""
    word = text.strip().lower()
    if word == "cpu":
        return str(os.cpu_count() or 1)
    if word not in ("gpu", "auto"):
        return text
    from accel.devices import probe

    if word == "auto":  # torchrun's: one per GPU where there are GPUs, else one per CPU
        return "auto" if probe(os.environ) else str(os.cpu_count() or 1)
    if not probe(os.environ):
        raise UsageError(
            "--nproc-per-node gpu: no GPU is visible here; give a number of workers "
            "(or 'cpu' for one per CPU)"
        )
    return "auto"


def _nnodes(text: str) -> tuple[str, str]:
    """``--nnodes N`` or torchrun's elastic ``MIN:MAX`` -> (min_machines, num_machines).

    A fixed N sets min_machines to null, so a ``min_machines`` in the config cannot turn
    the command line's fixed size into a range.
    """
    low, sep, high = (part.strip() for part in text.partition(":"))
    if not sep:
        return "null", low
    bad = f"invalid value for --nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, got {text!r}"
    if not (low.isdigit() and high.isdigit()) or not 1 <= int(low) <= int(high):
        raise UsageError(bad)
    return ("null" if low == high else low), high


def _standalone(flags: Mapping[str, Any]) -> dict[str, Any]:
    """torchrun --standalone: one node, a rendezvous of its own on a free port."""
    if str(flags.get("launch.num_machines", "1")) != "1":  # 1:1 is 1; 1:2 is not
        raise UsageError("--standalone runs on one node: drop --nnodes (or give --nnodes 1)")
    return {
        "launch.num_machines": 1,
        "launch.machine_rank": 0,
        "launch.rdzv_endpoint": "null",
        "launch.rdzv_id": "null",
    }


def _total(params: Mapping[str, Any]) -> str | None:
    total = params.get("num_processes")
    if total is None:
        return None
    if params.get("nproc_per_node") is not None:
        raise UsageError(
            "give either -n/--nproc-per-node (workers per node) or --num-processes "
            "(workers in the whole job, Hugging Face's meaning), not both"
        )
    text = str(total).strip().lower()
    if text != "auto" and not (text.isdigit() and int(text) >= 1):
        raise UsageError(
            f"invalid value for --num-processes: expected an integer >= 1 or 'auto', got {total!r}"
        )
    return text


def _main_endpoint(host: str | None, port: int | None) -> str | None:
    if host is None and port is None:
        return None
    from accel.config.resolve import flag_value

    host = host or DEFAULT_MASTER[0]
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    endpoint = f"{host}:{port if port is not None else DEFAULT_MASTER[1]}"
    try:
        return str(flag_value("launch.rdzv_endpoint", endpoint))
    except UsageError:
        raise UsageError(
            f"invalid --master-addr/--master-port: expected a host and a port from 1 to "
            f"65535, got {endpoint!r}"
        ) from None


def _config_file(path: Path | None) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """``--config_file``: a Hugging Face config's values, as flags below the explicit ones."""
    if path is None:
        return {}, {}, []
    from accel.config.project import read_hf

    result = read_hf(Path(path))
    values = dict(result.values)
    env = values.pop("launch.env", {})
    flags = {key: "null" if value is None else value for key, value in values.items()}
    return flags, dict(env), list(result.notes)
