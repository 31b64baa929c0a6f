"""NVML telemetry: resources.jsonl holds each GPU's readings and each rank's GPU memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuutil import GPU, SCRIPTS, cuda_count, launch_auto, runs

pytestmark = GPU


@pytest.mark.timeout(180)
def test_resources_jsonl_has_nvml_readings(project: Path) -> None:
    pytest.importorskip("pynvml", reason="NVML telemetry needs nvidia-ml-py (accel-workspace[gpu])")
    from accel.telemetry import read_samples

    launch_auto(
        project, "busy", str(SCRIPTS / "busy.py"), "6", env={"ACCEL_LOGS_RESOURCE_INTERVAL": "1s"}
    )
    record = runs(project)["busy"]
    samples = read_samples(
        project / ".accelerate" / "logs" / "runs" / record["id"] / "resources.jsonl"
    )
    with_gpus = [s for s in samples if s.gpus]
    assert with_gpus, f"no GPU readings in {len(samples)} samples"
    seen = {g.index for s in with_gpus for g in s.gpus}
    assert len(seen) >= cuda_count()
    assert max(g.util_percent or 0 for s in with_gpus for g in s.gpus) > 0
    assert all(g.name and g.memory_total_bytes for s in with_gpus for g in s.gpus)
    held = [r.gpu_memory_bytes or 0 for s in samples for r in s.ranks.values()]
    assert max(held) >= 256 * 2**20  # the 256 MiB each rank holds, per process
