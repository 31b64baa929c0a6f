"""`accel launch` on CUDA: -n auto, NCCL, one worker per GPU, and the mismatch refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpuutil import EXAMPLE, GPU, accel_run, cuda_count, failure, launch_auto, runs

pytestmark = GPU


@pytest.mark.timeout(240)
def test_launch_auto_trains_the_example_on_every_gpu_with_nccl(project: Path) -> None:
    done = launch_auto(
        project,
        "auto",
        "--env",
        "NCCL_DEBUG=INFO",  # NCCL introduces itself in every rank's log
        str(EXAMPLE),
        "--steps",
        "40",
        "--save-every",
        "20",
    )
    assert f"{cuda_count()} worker(s) on cuda" in done.stdout
    assert "done: 40 steps" in done.stdout
    record = runs(project)["auto"]
    assert record["status"] == "succeeded"
    assert record["world_size"] == record["nproc_per_node"] == cuda_count()
    run_dir = project / ".accelerate" / "logs" / "runs" / record["id"]
    for rank in range(cuda_count()):
        log = (run_dir / f"rank-{rank}.log").read_text()
        if cuda_count() > 1:  # one rank has no process group, so no NCCL
            assert "NCCL INFO" in log, f"rank {rank} did not use NCCL:\n{log[-2000:]}"
    from accel.workspace import Workspace

    state = Workspace(project / ".accelerate").checkpoints.load(series="auto")
    assert state["step"] == 40


@pytest.mark.timeout(120)
def test_more_workers_than_gpus_stop_before_anything_starts(project: Path) -> None:
    (project / "train.py").write_text("raise SystemExit('must not start')\n")
    wanted = cuda_count() + 1
    done = accel_run(project, "launch", "-n", str(wanted), "train.py")
    assert done.returncode == 2, failure(done)
    (line,) = done.stderr.strip().splitlines()
    assert f"{wanted} workers need a GPU each but {cuda_count()} GPU" in line, line
    assert "--cpu" in line and "--gpu-ids" in line and "Traceback" not in done.stderr
    assert not (project / ".accelerate" / "logs" / "runs").exists()


@pytest.mark.timeout(120)
def test_env_json_lists_the_gpus_without_starting_cuda(project: Path) -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from accel.cli.main import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    main(['env', '--json'])\n"
        "import torch\n"
        "assert not torch.cuda.is_initialized(), 'accel env --json initialised CUDA'\n"
        "print(json.dumps(json.loads(out.getvalue())['devices']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    devices = json.loads(done.stdout)
    import torch

    assert [d["index"] for d in devices] == list(range(torch.cuda.device_count()))
    names = sorted(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    assert sorted(d["name"] for d in devices) == names
