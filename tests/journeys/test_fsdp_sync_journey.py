"""The journey of an FSDP user's checkpoints: train on 2 ranks with FSDP, a rank killed
inside a save, the restart resumes; push the workspace to a remote, pull it into another
project, verify every file there, and export the model from the pulled copy.

Each step is a feature with its own tests; this is where they meet (issue 23: sharded
checkpoints were skipped by push, and pulls of any workspace with runs exited 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from accel.workspace import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fsdp"))
from test_fsdp_resume import _accel, _train


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_fsdp_train_kill_restart_push_pull_verify_export(project: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    elsewhere, home = tmp_path / "elsewhere", tmp_path / "home"  # home: the fixture's
    elsewhere.mkdir()
    out = _train(project, "fsdp", "shards:15", "--max-restarts", "1")  # rank 1 SIGKILLed
    remote = f"file://{tmp_path / 'remote'}"

    pushed = _accel(project, home, "sync", "push", remote)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "skipped checkpoints" not in pushed.stdout + pushed.stderr
    pulled = _accel(elsewhere, home, "sync", "pull", remote)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr

    here = Workspace(project / ".accelerate").checkpoints.list("fsdp")
    there = Workspace(elsewhere / ".accelerate").checkpoints.list("fsdp")
    assert [i.step for i in there] == [i.step for i in here] == [10, 15, 20]
    assert [i.files for i in there] == [i.files for i in here]  # names, sizes, checksums
    assert all(any(f.startswith("sharded/") for f in i.files) for i in there)

    verified = _accel(elsewhere, home, "checkpoints", "verify", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)

    runs = json.loads(_accel(elsewhere, home, "runs", "--json").stdout)
    assert [r["name"] for r in runs] == ["fsdp"]

    target = tmp_path / "model.safetensors"
    exported = _accel(elsewhere, home, "checkpoints", "export", "20", "-o", str(target))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    model = load_file(str(target))
    final = torch.load(out / "final.pt", weights_only=True)  # what training ended with
    assert sorted(model) == sorted(final)
    assert all(torch.equal(model[k], final[k]) for k in final)
