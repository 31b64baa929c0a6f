"""CUDA state written through the pinned ring (accel.store._stream): the very bytes of
its host copy, buffers reused across saves, and the save's throughput against the disk.

The throughput is reported (stdout and the JUnit record), never asserted: timing
depends on the machine. ``scripts/gpu-check.sh`` also runs the checkpoint benchmark
with ``--device cuda`` for the ratios against raw write+fsync and torch.save.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from gpuutil import GPU

from accel.store import _stream
from accel.store.tensorfile import save_tensor_file
from accel.workspace import Workspace

pytestmark = GPU

MiB = 1 << 20


def _state(device: str) -> dict[str, Any]:
    gen = torch.Generator(device=device).manual_seed(0)
    return {
        "big": torch.randn(3 * _stream.CHUNK // 4 + 12345, device=device, generator=gen),  # ragged
        "half": torch.randn(1000, 999, device=device, generator=gen).to(torch.bfloat16),
        "strided": torch.randn(2048, 1024, device=device, generator=gen).t(),
        "small": [torch.randn(7, device=device, generator=gen) for _ in range(50)],
        "empty": torch.empty(0, 4, device=device),
    }


def _to_cpu(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_to_cpu(v) for v in tree]
    return tree.cpu()


@pytest.mark.timeout(120)
def test_a_cuda_state_is_written_as_its_host_copy_through_reused_pinned_buffers(
    tmp_path: Path,
) -> None:
    devices = [f"cuda:{i}" for i in range(min(2, torch.cuda.device_count()))]
    for device in devices:  # a tensor on another GPU than the current one too
        state = _state(device)
        host = save_tensor_file(_to_cpu(state), tmp_path / f"host-{device}")
        first = save_tensor_file(state, tmp_path / f"cuda-{device}")
        second = save_tensor_file(state, tmp_path / f"again-{device}")
        assert first == host == second
        data = (tmp_path / f"host-{device}").read_bytes()
        assert (tmp_path / f"cuda-{device}").read_bytes() == data
    pinned = [ring for ring in _stream._idle if ring.pinned]
    assert len(pinned) == 1  # one ring, leased by every save in turn
    assert all(slot.is_pinned() for slot in pinned[0].slots)


def _median_seconds(fn: Callable[[int], Any], count: int) -> float:
    times = []
    for i in range(count):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@pytest.mark.timeout(240)
def test_cuda_save_throughput_against_raw_write(
    project: Path, record_property: Callable[[str, object], None]
) -> None:
    mib = 1024
    state = {f"w{i}": torch.randn(4 * MiB, device="cuda") for i in range(mib // 16)}
    host = [t.cpu().reshape(-1).view(torch.uint8).numpy() for t in state.values()]
    raw_path = project / "raw.bin"

    def raw(_: int) -> None:
        with open(raw_path, "wb", buffering=0) as fh:
            for view in host:
                data = memoryview(view)
                while data.nbytes:
                    data = data[fh.write(data) :]
            os.fsync(fh.fileno())

    env = {**os.environ, "ACCEL_CHECKPOINTS_KEEP_LAST": "2"}
    ws = Workspace(project / ".accelerate", env=env).ensure()
    ws.checkpoints.save(state, 0)  # the lease, the pinned ring
    raw(0)
    accel = _median_seconds(lambda i: ws.checkpoints.save(state, i + 1), 4)
    bare = _median_seconds(raw, 4)
    ws.checkpoints.wait()
    loaded = ws.checkpoints.load()
    assert all(torch.equal(loaded[k], v.cpu()) for k, v in state.items())
    record_property("cuda_save_MiB_per_s", round(mib / accel))
    record_property("raw_write_fsync_MiB_per_s", round(mib / bare))
    print(
        f"CUDA save of {mib} MiB: {mib / accel:.0f} MiB/s; raw write+fsync of its bytes: "
        f"{mib / bare:.0f} MiB/s; ratio {bare / accel:.2f}"
    )
