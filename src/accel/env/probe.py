"""The machine as accel sees it: Python, platform, packages, torch, devices, variables.

torch is imported inside :func:`torch_info` and :func:`device_info` only, never at
module level. Without ``devices=True`` the GPUs come from the cheap probe of
:mod:`accel.devices` (NVML or the driver's files), which never initialises CUDA.
"""

from __future__ import annotations

import json
import os
import platform as _platform
import sys
from collections.abc import Mapping
from typing import Any

from accel._redact import REDACTED, redact_env, scrub, secret_values
from accel.config import schema
from accel.devices import DeviceInfo
from accel.devices import probe as probe_devices
from accel.env.report import TorchInfo

ENV_PREFIXES = (
    "ACCEL_",
    "ACCELERATE_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "PYTORCH_",
    "TORCHELASTIC_",
    "HIP_",
    "ROCR_",
    "HF_",
    "SLURM_",
)
ENV_NAMES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
)
PACKAGES = ("numpy", "accelerate", "transformers", "safetensors", "filelock", "typer", "rich")
LAUNCH_ENV = schema.BY_KEY["launch.env"].env_var  # the workers' variables, as KEY=VALUE or JSON


def relevant_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that matter to training, redacted, sorted by name.

    ``ACCEL_LAUNCH_ENV`` is shown as the variables it sets, each redacted by its own name
    (``***`` whole when it does not parse), and their secret values are scrubbed from
    every other value shown."""
    chosen = {k: v for k, v in env.items() if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}
    shown = redact_env({k: chosen[k] for k in sorted(chosen)})
    pairs = launch_env_pairs(chosen)
    if LAUNCH_ENV in shown:
        shown[LAUNCH_ENV] = _pairs_shown(pairs, chosen[LAUNCH_ENV])
    secrets = secret_values(chosen, pairs or {})
    return {k: scrub(v, secrets) for k, v in shown.items()} if secrets else shown


def launch_env_pairs(env: Mapping[str, str]) -> dict[str, str] | None:
    """The variables ``ACCEL_LAUNCH_ENV`` sets for the workers; None when it does not parse.

    Never raises: redaction calls it, a crash log's among them, and whatever the variable
    holds, the crash must still be logged (its text is then redacted as any text is)."""
    if LAUNCH_ENV not in env:
        return {}
    try:
        pairs = schema.parse_text(schema.BY_KEY["launch.env"], env[LAUNCH_ENV])
    except Exception:  # noqa: BLE001 - ValueError, or a parser's bug: unparsed either way
        return None
    return dict(pairs or {})


def _pairs_shown(pairs: dict[str, str] | None, text: str) -> str:
    if pairs is None:
        return REDACTED
    shown = redact_env(pairs)
    if text.lstrip().startswith("{"):
        return json.dumps(shown)
    return ",".join(f"{name}={value}" for name, value in shown.items())


def python_info() -> dict[str, str]:
    return {
        "version": _platform.python_version(),
        "implementation": _platform.python_implementation(),
        "executable": sys.executable or "",
    }


def platform_info() -> dict[str, Any]:
    # os.uname(), not platform.uname(): the latter's processor field (which
    # platform.platform() reads) runs `uname -p` in a subprocess on every call.
    uname = os.uname()
    libc, libc_version = _platform.libc_ver()
    parts = [uname.sysname, uname.release, uname.machine]
    if libc:
        parts += ["with", libc + libc_version]
    return {
        "system": uname.sysname,
        "release": uname.release,
        "machine": uname.machine,
        "platform": "-".join(p for p in parts if p),
        "cpu_count": os.cpu_count(),  # a number, or null where the OS does not say
    }


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except Exception:  # noqa: BLE001 - a broken distribution is just "unknown"
            versions[name] = None
    return versions


def torch_info() -> TorchInfo:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
        return TorchInfo(None, None, None, None, None, {}, error=f"{type(exc).__name__}: {exc}")
    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    build = "rocm" if hip else "cuda" if cuda else "cpu"
    return TorchInfo(
        version=str(torch.__version__),
        build=build,
        cuda=cuda,
        hip=hip,
        cudnn=_cudnn_version(torch),
        backends=_backends(torch),
    )


def _cudnn_version(torch: Any) -> int | None:
    try:
        version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001
        return None
    return int(version) if version is not None else None


def _backends(torch: Any) -> dict[str, bool]:
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return {"gloo": False, "nccl": False, "mpi": False}
    return {
        name: bool(getattr(dist, f"is_{name}_available", lambda: False)())
        for name in ("gloo", "nccl", "mpi")
    }


def devices_of(
    torch: TorchInfo, env: Mapping[str, str], how: bool | None
) -> tuple[DeviceInfo, ...] | None:
    if how is False:
        return None
    if how is True or torch.build == "rocm":  # the probe knows NVIDIA GPUs only
        return device_info() if torch.error is None else ()
    return probe_devices(env)


def device_info() -> tuple[DeviceInfo, ...]:
    """The visible GPUs (CUDA or ROCm); empty without any. Initialises the driver."""
    try:
        import torch

        if not torch.cuda.is_available():
            return ()
        return tuple(_device(torch, i) for i in range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - a broken driver is reported as no devices
        return ()


def _device(torch: Any, index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    capability = f"{props.major}.{props.minor}" if hasattr(props, "major") else None
    return DeviceInfo(index, str(props.name), int(props.total_memory), capability)
