"""GPU readings through NVML (``pynvml`` from the ``nvidia-ml-py`` package).

Only when the module imports and a driver answers with at least one device; anything
else (no package, no driver, a CPU machine) means no GPU readings, never an error.
Each reading is fetched on its own: a GPU that cannot report its power still reports
its memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class GpuStats:
    """One GPU at one instant; a field is None when the device does not report it."""

    index: int
    name: str | None = None
    util_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None


class Nvml:
    """An initialised NVML session; :meth:`close` shuts it down."""

    def __init__(self, module: ModuleType, indices: Sequence[int]) -> None:
        self._nv = module
        self._handles = {i: module.nvmlDeviceGetHandleByIndex(i) for i in indices}
        self._names = {i: self._name(h) for i, h in self._handles.items()}

    @property
    def indices(self) -> list[int]:
        return list(self._handles)

    def read(self) -> list[GpuStats]:
        return [self._read_one(i, h) for i, h in self._handles.items()]

    def process_memory(self) -> dict[int, int]:
        """``pid -> bytes`` of GPU memory used by each compute process, over all GPUs."""
        used: dict[int, int] = {}
        for handle in self._handles.values():
            for proc in self._processes(handle):
                memory = getattr(proc, "usedGpuMemory", None)
                if isinstance(memory, int):
                    used[int(proc.pid)] = used.get(int(proc.pid), 0) + memory
        return used

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()

    def _processes(self, handle: Any) -> list[Any]:
        procs = self._get(lambda: self._nv.nvmlDeviceGetComputeRunningProcesses(handle))
        return list(procs or ())

    def _name(self, handle: Any) -> str | None:
        return self._get(lambda: _text(self._nv.nvmlDeviceGetName(handle)))

    def _read_one(self, index: int, handle: Any) -> GpuStats:
        nv = self._nv
        util = self._get(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
        memory = self._get(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
        temp = self._get(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
        power = self._get(lambda: nv.nvmlDeviceGetPowerUsage(handle))
        return GpuStats(
            index=index,
            name=self._names.get(index),
            util_percent=float(util.gpu) if util is not None else None,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            power_w=round(power / 1000.0, 1) if power is not None else None,  # NVML: milliwatts
        )

    @staticmethod
    def _get(fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends
            return None


def open_nvml(indices: Sequence[int] | None = None) -> Nvml | None:
    """An NVML session over ``indices`` (default: every GPU), or None without one."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver / library: a CPU machine
        return None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        wanted = [i for i in (range(count) if indices is None else indices) if 0 <= i < count]
        if not wanted:
            raise LookupError("no GPU")
        return Nvml(pynvml, wanted)
    except Exception:  # noqa: BLE001
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
