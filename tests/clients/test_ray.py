"""Ray Train for real: ``TorchTrainer`` on CPU with 2 workers runs a loop that uses
``accel.Accelerator``. Ray starts the processes and makes the process group itself; the
``Accelerator`` joins that world (it does not make one of its own, which would hang or
train each worker alone), saves through accel's store, and a second ``fit()`` resumes
from it. A marked ``clients`` test: ``pip install "ray[train]"``, then ``pytest -m
clients`` (.ci/run does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accel import Workspace

TRAINER = Path(__file__).resolve().parent / "scripts" / "ray_trainer.py"

pytestmark = [pytest.mark.clients, pytest.mark.slow, pytest.mark.timeout(900)]


def fit(workspace: Path, out: Path, tag: str, steps: int) -> list[dict[str, object]]:
    """One ``TorchTrainer.fit()`` in a fresh Ray instance; what each rank saw."""
    done = subprocess.run(
        [sys.executable, str(TRAINER), str(workspace), str(out), tag, str(steps)],
        env={**os.environ, "RAY_TRAIN_V2_ENABLED": "0", "RAY_USAGE_STATS_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [json.loads((out / f"{tag}-rank{rank}.json").read_text()) for rank in (0, 1)]


def test_an_accelerator_in_ray_trains_joins_rays_world_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip(
        "ray.train.torch", reason='Ray Train is not installed: pip install "ray[train]"'
    )
    pytest.importorskip(
        "ray.train.torch", reason='Ray Train is not installed: pip install "ray[train]"'
    )
    workspace, out = tmp_path / ".accelerate", tmp_path / "out"
    out.mkdir()
    first = fit(workspace, out, "first", 3)
    assert [(s["rank"], s["world"], s["main"], s["group_rank"]) for s in first] == [
        (0, 2, True, 0), (1, 2, False, 1)
    ]  # fmt: skip
    assert [s["resumed"] for s in first] == [None, None]
    again = fit(workspace, out, "again", 3)
    assert [s["resumed"] for s in again] == [3, 3]  # both ranks, from accel's store
    assert again[0]["weights"] == again[1]["weights"] != first[0]["weights"]  # one model
    steps = [c.step for c in Workspace(workspace).checkpoints.list()]
    assert steps == [3, 6]
