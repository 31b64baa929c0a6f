"""The GPUs this machine shows a worker, found without importing torch or starting CUDA.

:func:`probe` asks NVML (``nvidia-ml-py``, when installed), else reads the NVIDIA
driver's ``/proc/driver/nvidia/gpus/*/information``; either way it applies
``CUDA_VISIBLE_DEVICES`` as CUDA does (indices or ``GPU-`` UUID prefixes, stopping at
the first entry that names no GPU). Indices are those the workers will use, numbered in
PCI bus order (``CUDA_DEVICE_ORDER=PCI_BUS_ID``). Neither source initialises CUDA: a
probe costs milliseconds, not the seconds of ``torch.cuda.get_device_properties``.

:func:`gpu_mismatch` is the rule ``accel launch`` and ``accel env --check`` share: pure,
it takes the count, so it is tested without a GPU.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

PROC_GPUS = Path("/proc/driver/nvidia/gpus")


@dataclass(frozen=True)
class DeviceInfo:
    """One visible GPU; a field is None when the source does not tell."""

    index: int
    name: str
    total_memory: int | None
    capability: str | None
    uuid: str | None = None


def probe(env: Mapping[str, str], proc_root: Path = PROC_GPUS) -> tuple[DeviceInfo, ...]:
    """The GPUs a worker started with ``env`` would see; empty without any."""
    wanted = env.get("CUDA_VISIBLE_DEVICES")
    if wanted is not None and not wanted.strip():
        return ()  # an empty list hides every GPU: nothing to ask the driver
    found = nvml_devices()
    if found is None:
        found = proc_devices(proc_root)
    return visible(found, wanted)


def visible(devices: Sequence[DeviceInfo], wanted: str | None) -> tuple[DeviceInfo, ...]:
    """``devices`` as ``CUDA_VISIBLE_DEVICES=wanted`` shows them, renumbered from 0."""
    if wanted is None:
        return tuple(replace(d, index=i) for i, d in enumerate(devices))
    chosen: list[DeviceInfo] = []
    for item in (part.strip() for part in wanted.split(",")):
        device = _named(devices, item)
        if device is None or device in chosen:
            break  # CUDA ignores everything from the first entry that names no GPU
        chosen.append(device)
    return tuple(replace(d, index=i) for i, d in enumerate(chosen))


def _named(devices: Sequence[DeviceInfo], item: str) -> DeviceInfo | None:
    if re.fullmatch(r"\d+", item):
        index = int(item)
        return devices[index] if index < len(devices) else None
    if item.startswith("GPU-"):
        matches = [d for d in devices if d.uuid and d.uuid.startswith(item)]
        return matches[0] if len(matches) == 1 else None
    return None


def nvml_devices() -> tuple[DeviceInfo, ...] | None:
    """Every GPU NVML reports; None when NVML cannot be asked (no package, no driver)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        return tuple(_nvml_device(pynvml, i) for i in range(count))
    except Exception:  # noqa: BLE001 - a driver that answers nothing useful
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvml_device(nv: Any, index: int) -> DeviceInfo:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    memory = _maybe(lambda: int(nv.nvmlDeviceGetMemoryInfo(handle).total))
    major_minor = _maybe(lambda: nv.nvmlDeviceGetCudaComputeCapability(handle))
    return DeviceInfo(
        index=index,
        name=_text(nv.nvmlDeviceGetName(handle)),
        total_memory=memory,
        capability=f"{major_minor[0]}.{major_minor[1]}" if major_minor else None,
        uuid=_maybe(lambda: _text(nv.nvmlDeviceGetUUID(handle))),
    )


def proc_devices(root: Path = PROC_GPUS) -> tuple[DeviceInfo, ...]:
    """The GPUs the NVIDIA driver lists under ``root`` (name and UUID only), bus order."""
    try:
        folders = sorted(p for p in root.iterdir() if (p / "information").is_file())
    except OSError:
        return ()
    found: list[DeviceInfo] = []
    for folder in folders:  # named by PCI bus location: sorted is CUDA's PCI_BUS_ID order
        fields = _proc_fields((folder / "information").read_text(errors="replace"))
        name = fields.get("Model", "NVIDIA GPU")
        found.append(DeviceInfo(len(found), name, None, None, fields.get("GPU UUID")))
    return tuple(found)


def _proc_fields(text: str) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _maybe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported on some boards
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- the rule ------------------------------------------------------------------------------


def workers_for(value: int | str, visible_gpus: int, gpu_ids: Sequence[int] | None) -> int:
    """``launch.num_processes`` as a count: ``auto`` is one per chosen GPU, else 1."""
    if value != "auto":
        return int(value)
    if gpu_ids is not None and visible_gpus > 0:
        return len(gpu_ids)
    return max(1, visible_gpus)


def gpu_mismatch(nproc: int, visible_gpus: int, gpu_ids: Iterable[int] | None) -> str | None:
    """Why ``nproc`` workers on this node cannot have a GPU each, or None when they can.

    No visible GPU is no mismatch: the workers then run on the CPU (gloo), as they do
    under Hugging Face Accelerate, ``--gpu-ids`` or not.
    """
    if visible_gpus <= 0:
        return None
    seen = "1 GPU is visible" if visible_gpus == 1 else f"{visible_gpus} GPUs are visible"
    if gpu_ids is not None:
        ids = list(gpu_ids)
        missing = ",".join(str(i) for i in ids if i >= visible_gpus)
        if missing:
            return (
                f"--gpu-ids asks for GPU {missing} but {seen}: choose among those "
                "(numbered from 0), or run on the CPU with --cpu"
            )
        if nproc > len(ids):
            return (
                f"{nproc} workers need a GPU each but --gpu-ids names {len(ids)}: use "
                f"-n {len(ids)}, name more GPUs with --gpu-ids, or run on the CPU with --cpu"
            )
        return None
    if visible_gpus < nproc:
        return (
            f"{nproc} workers need a GPU each but {seen}: use -n {visible_gpus} (or -n auto), "
            "choose GPUs with --gpu-ids, or run on the CPU with --cpu"
        )
    return None
