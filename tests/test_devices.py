"""accel.devices: the GPU probe without torch, CUDA_VISIBLE_DEVICES, and the mismatch rule."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from accel import devices
from accel.devices import DeviceInfo, gpu_mismatch, visible

H200 = DeviceInfo(0, "NVIDIA H200", 150_000_000_000, "9.0", "GPU-aaaa1111")
A100 = DeviceInfo(1, "NVIDIA A100", 80_000_000_000, "8.0", "GPU-bbbb2222")
L4 = DeviceInfo(2, "NVIDIA L4", 24_000_000_000, "8.9", "GPU-aaab3333")
ALL = (H200, A100, L4)


def names(found: tuple[DeviceInfo, ...]) -> list[tuple[int, str]]:
    return [(d.index, d.name) for d in found]


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (None, [(0, "NVIDIA H200"), (1, "NVIDIA A100"), (2, "NVIDIA L4")]),
        ("1", [(0, "NVIDIA A100")]),  # renumbered from 0, as the workers see them
        ("2,0", [(0, "NVIDIA L4"), (1, "NVIDIA H200")]),
        ("0, 1", [(0, "NVIDIA H200"), (1, "NVIDIA A100")]),
        ("1,7,0", [(0, "NVIDIA A100")]),  # CUDA stops at the first entry naming no GPU
        ("-1", []),
        ("", []),
        ("0,0", [(0, "NVIDIA H200")]),
        ("GPU-bbbb", [(0, "NVIDIA A100")]),  # a unique UUID prefix
        ("GPU-aaa", []),  # ambiguous: H200 and L4
        ("MIG-1234", []),
    ],
)
def test_visible_applies_cuda_visible_devices_as_cuda_does(
    wanted: str | None, expected: list[tuple[int, str]]
) -> None:
    assert names(visible(ALL, wanted)) == expected


def _fake_proc(root: Path, gpus: dict[str, str]) -> Path:
    for bus, model in gpus.items():
        folder = root / bus
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: \t\t {model}\nIRQ:   \t\t 180\nGPU UUID: \t GPU-{bus[5:7]}00\n"
            f"Bus Location: \t {bus}\nDevice Minor: \t 0\n"
        )
    return root


def test_proc_devices_reads_the_driver_in_bus_order(tmp_path: Path) -> None:
    root = _fake_proc(tmp_path, {"0000:9a:00.0": "NVIDIA H100", "0000:19:00.0": "NVIDIA H200"})
    (tmp_path / "0000:ff:00.0").mkdir()  # a folder without information: not a GPU
    found = devices.proc_devices(root)
    assert names(found) == [(0, "NVIDIA H200"), (1, "NVIDIA H100")]
    assert found[0].uuid == "GPU-1900" and found[0].total_memory is None


def test_proc_devices_without_a_driver_is_empty(tmp_path: Path) -> None:
    assert devices.proc_devices(tmp_path / "absent") == ()


class _FakeNvml(types.ModuleType):
    """The part of pynvml a driver answers, for a machine with two GPUs."""

    def __init__(self, fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.fail_init = fail_init
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return [b"NVIDIA H200", b"NVIDIA A100"][h]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=[150, 80][h] * 10**9)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        if h == 1:
            raise RuntimeError("Not Supported")
        return (9, 0)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}abc"


def test_nvml_is_asked_first_and_shut_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nvml = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = devices.probe({"CUDA_VISIBLE_DEVICES": "1,0"}, _fake_proc(tmp_path, {}))
    assert names(found) == [(0, "NVIDIA A100"), (1, "NVIDIA H200")]
    assert found[1] == DeviceInfo(1, "NVIDIA H200", 150 * 10**9, "9.0", "GPU-0abc")
    assert found[0].capability is None  # a reading the board does not support
    assert nvml.shut_down


def test_without_nvml_the_driver_files_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(fail_init=True))
    root = _fake_proc(tmp_path, {"0000:19:00.0": "NVIDIA H200"})
    assert names(devices.probe({}, root)) == [(0, "NVIDIA H200")]
    assert devices.probe({"CUDA_VISIBLE_DEVICES": ""}, root) == ()


@pytest.mark.slow
def test_probe_does_not_import_torch() -> None:
    code = (
        "import sys, os\nfrom accel import devices\ndevices.probe(os.environ)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_probe_agrees_with_torch_on_this_machine() -> None:
    torch = pytest.importorskip("torch")
    import os

    found = devices.probe(os.environ)
    if torch.version.cuda is None and found:
        pytest.skip("a CPU build of torch on a machine with GPUs: torch sees none")
    assert len(found) == torch.cuda.device_count()


@pytest.mark.parametrize(
    ("nproc", "count", "gpu_ids", "problem"),
    [
        (2, 0, None, None),  # no GPU: the workers run on the CPU
        (1, 1, None, None),
        (2, 2, None, None),
        (2, 1, None, "2 workers need a GPU each but 1 GPU is visible: use -n 1"),
        (8, 4, None, "8 workers need a GPU each but 4 GPUs are visible: use -n 4"),
        (2, 4, [1, 3], None),
        (2, 1, [0, 1], "--gpu-ids asks for GPU 1 but 1 GPU is visible"),
        (3, 4, [0, 1], "3 workers need a GPU each but --gpu-ids names 2: use -n 2"),
        (1, 0, [0, 1], None),  # no GPU: the CPU, as Hugging Face Accelerate does
    ],
)
def test_gpu_mismatch(nproc: int, count: int, gpu_ids: list[int] | None, problem: str) -> None:
    found = gpu_mismatch(nproc, count, gpu_ids)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)
        assert "--cpu" in found and "\n" not in found


def test_every_mismatch_says_what_to_do() -> None:
    found = gpu_mismatch(2, 1, None)
    assert found is not None
    for remedy in ("-n 1", "--gpu-ids", "--cpu"):
        assert remedy in found
