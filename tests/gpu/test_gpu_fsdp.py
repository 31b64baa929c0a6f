"""FSDP on CUDA with NCCL: sharded parameters, and a crash + restart that resumes bit for bit.

Two workers, one GPU each (FSDP shards across ranks: one GPU has nothing to shard), with
deterministic algorithms; rank 1 crashes after step 13 of 20, the run resumes from the
checkpoint of step 10 and must end with the weights of an uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from gpuutil import GPU, ROOT, accel_run, cuda_count, failure

pytestmark = [
    *GPU,
    pytest.mark.skipif(cuda_count() < 2, reason="FSDP shards across ranks: needs 2 CUDA GPUs"),
]
SCRIPT = ROOT / "tests" / "fsdp" / "scripts" / "train_fsdp.py"


def _train(project: Path, name: str, crash: str, *extra: str) -> Path:
    out = project / name
    out.mkdir()
    done = accel_run(
        project,
        *("launch", "-n", "2", "--fsdp", "--run-name", name, *extra),
        *("--env", "CUBLAS_WORKSPACE_CONFIG=:4096:8"),
        *(str(SCRIPT), "20", "5", crash, str(out)),
    )
    assert done.returncode == 0, failure(done)
    return out


@pytest.mark.timeout(240)
def test_fsdp_on_cuda_shards_and_resumes_bit_for_bit(project: Path) -> None:
    clean = _train(project, "clean", "none")
    crashed = _train(project, "crashed", "step:13", "--max-restarts", "1")
    reports = [json.loads((crashed / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert all(r["dtensor"] and r["shard0"] and r["resumed"] == 10 for r in reports), reports
    assert sum(r["local"] for r in reports) == reports[0]["total"]
    a = torch.load(clean / "final.pt", weights_only=True)
    b = torch.load(crashed / "final.pt", weights_only=True)
    assert a.keys() == b.keys()
    assert all(v.device.type == "cpu" for v in a.values())  # gathered to rank 0's CPU
    for key, tensor in a.items():
        assert torch.equal(tensor, b[key]), key
