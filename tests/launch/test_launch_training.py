"""Real training under accel launch: restart + resume, two nodes on loopback."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import SCRIPTS, assert_no_orphans

from run_helpers import free_port

# On the oldest supported torch too (.ci/run): this leans on torch's internals.
pytestmark = pytest.mark.edge

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train.py"
Accel = Callable[..., subprocess.CompletedProcess[str]]
StartAccel = Callable[..., subprocess.Popen[str]]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_restart_resumes_and_matches_the_uninterrupted_run(accel: Accel, project: Path) -> None:
    import torch

    from accel.workspace import Workspace

    train = ["--steps", "30", "--save-every", "10", "--log-every", "5"]
    clean = accel("launch", "-n", "2", "--run-name", "clean", str(EXAMPLE), *train, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "done: 30 steps" in clean.stdout
    crashed = accel(
        "launch",
        "-n",
        "2",
        "--run-name",
        "crashed",
        "--max-restarts",
        "1",
        str(SCRIPTS / "crash_once.py"),
        str(EXAMPLE),
        "25",
        *train,
        timeout=120,
    )
    assert crashed.returncode == 0, crashed.stdout + crashed.stderr
    assert "simulated crash at step 25" in crashed.stderr  # the traceback, on stderr
    assert "resumed from the checkpoint of step 20" in crashed.stdout

    ws = Workspace(project / ".accelerate")
    a = ws.checkpoints.load(series="clean")
    b = ws.checkpoints.load(series="crashed")
    assert a["step"] == b["step"] == 30
    for name, tensor in a["models"][0].items():
        assert torch.equal(tensor, b["models"][0][name]), name

    records = {r["name"]: r for r in json.loads(accel("runs", "--json").stdout)}
    assert records["crashed"]["restarts"] == 1 and records["crashed"]["status"] == "succeeded"
    assert records["clean"]["restarts"] == 0
    metrics = Path(records["clean"]["path"]) / "metrics.jsonl"
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [
        5,
        10,
        15,
        20,
        25,
        30,
    ]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_nodes_on_loopback(start_accel: StartAccel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [
        start_accel(
            "launch",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--rdzv-endpoint",
            endpoint,
            "--rdzv-id",
            "job1",
            "-n",
            "1",
            str(SCRIPTS / "env_dump.py"),
            str(out),
            "--all-reduce",
        )
        for rank in (0, 1)
    ]
    for node in nodes:
        stdout, stderr = node.communicate(timeout=100)
        assert node.returncode == 0, stdout + stderr
    envs = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert {e["env"]["WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["env"]["GROUP_WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["env"]["LOCAL_RANK"] for e in envs} == {"0"}
    assert {e["env"]["TORCHELASTIC_RUN_ID"] for e in envs} == {"job1"}
    assert [e["all_reduce"] for e in envs] == [3.0, 3.0]
    runs_dir = project / ".accelerate" / "logs" / "runs"
    records = [json.loads((d / "run.json").read_text()) for d in runs_dir.iterdir()]
    assert sorted(r["node_rank"] for r in records) == [0, 1]
    assert all(r["nnodes"] == 2 and r["world_size"] == 2 for r in records)
    for r in records:
        assert_no_orphans(r["id"])
