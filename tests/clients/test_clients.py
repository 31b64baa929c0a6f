"""Real third-party clients under `accel launch` give torchrun's result, bit for bit.

A transformers ``Trainer`` on a tiny randomly initialised BERT, Lightning's ``Trainer``
and Lightning Fabric, each run under ``torchrun --nproc-per-node 2`` and ``accel launch --cpu -n 2``: the
final weights hash the same, the losses are equal, and their progress bars and warnings
stay on stderr as under torchrun (Lightning's Trainer: its bar is off, it writes to stdout). Heavy installs (transformers, lightning), so a marked
set: ``pip install transformers lightning accelerate`` then ``pytest -m clients``
(.ci/run does). Nothing is downloaded: the model is built from a config in code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from run_helpers import aborted_in_teardown, free_port

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

pytestmark = [
    pytest.mark.clients,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed"),
]


def run_both(script: str, project: Path, accel_exe: list[str]) -> dict[str, Any]:
    """The script under torchrun and under accel launch: results and output streams."""
    out = project / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1"}
    commands = {
        "torchrun": [str(TORCHRUN), "--nproc-per-node", "2", "--master-port", str(free_port())],
        "accel": [*accel_exe, "launch", "--cpu", "-n", "2"],
    }
    found: dict[str, Any] = {}
    for name, launcher in commands.items():
        for _ in range(3 if name == "torchrun" else 1):
            done = subprocess.run(
                [*launcher, str(SCRIPTS / script), str(out), name],
                cwd=project,
                capture_output=True,
                text=True,
                timeout=280,
                env=env,
            )
            if not aborted_in_teardown(done):  # the baseline's, asked again
                break
        assert done.returncode == 0, f"{name}:\n{done.stdout}\n{done.stderr}"
        found[name] = {
            "result": json.loads((out / f"{name}.json").read_text()),
            "stdout": done.stdout,
            "stderr": done.stderr,
        }
    return found


def assert_same_run(found: dict[str, Any]) -> None:
    theirs, ours = found["torchrun"], found["accel"]
    assert ours["result"] == theirs["result"]  # weights hash, every loss, world size
    assert ours["result"]["world_size"] == 2
    # progress bars (tqdm writes to stderr) stay on stderr, as under torchrun
    for run in (theirs, ours):
        assert "it/s]" in run["stderr"] and "it/s]" not in run["stdout"]


def test_transformers_trainer_matches_torchrun(project: Path, accel_exe: list[str]) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    assert_same_run(run_both("hf_trainer.py", project, accel_exe))


def test_lightning_fabric_matches_torchrun(project: Path, accel_exe: list[str]) -> None:
    pytest.importorskip("lightning")
    found = run_both("fabric_train.py", project, accel_exe)
    assert_same_run(found)
    assert "[rank0] epoch 1: 100%|" in found["accel"]["stderr"]


def test_lightning_trainer_matches_torchrun(project: Path, accel_exe: list[str]) -> None:
    """The Trainer, not Fabric: what most Lightning scripts use, its DDP strategy under
    the elastic environment it detects, and its own checkpoint callback."""
    pytest.importorskip("lightning")
    found = run_both("lightning_trainer.py", project, accel_exe)
    theirs, ours = found["torchrun"]["result"], found["accel"]["result"]
    assert ours == theirs  # weights hash, every loss, world size, environment, checkpoint
    assert ours["world_size"] == 2 and ours["environment"] == "TorchElasticEnvironment"
    assert len(ours["losses"]) == 16 and ours["checkpoints"] == ["epoch=1-step=16.ckpt"]
