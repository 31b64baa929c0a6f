"""The journey of an FSDP user's checkpoints: train on 2 ranks with FSDP, a rank killed
inside a save, the restart resumes; push the workspace to a remote, pull it into another
project, verify every file there, and export the model from the pulled copy.

Each step is a feature with its own tests; this is where they meet (issue 23: sharded
checkpoints were skipped by push, and pulls of any workspace with runs exited 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
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
    # Every committed checkpoint travels (the steps below). The one thing a push may skip
    # is the temporary folder of the save rank 1 was killed in, while it is young enough
    # that it could still be a save in progress (on a loaded machine it often is).
    said = (pushed.stdout + pushed.stderr).splitlines()
    skipped = [line for line in said if "skipped " in line]
    debris = "/.tmp-000000000015-"
    assert all(debris in line and "a crash left" in line for line in skipped), skipped
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


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_workspace_made_by_every_feature_round_trips_through_push_and_pull(
    project: Path, tmp_path: Path, accel: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """FSDP with a kill and a restart, a preloaded run that crashes, hangs (detected and
    killed) and restarts, metrics and resource samples: push exits 0, the pull elsewhere
    exits 0, and what arrives is what was here, verified."""
    from journeys.test_preload_journey import SCRIPT

    _train(project, "fsdp", "shards:15", "--max-restarts", "1")
    (project / "hangs.py").write_text(SCRIPT)
    (project / "out").mkdir()
    hung = accel(
        *("launch", "-n", "2", "--preload", "--max-restarts", "2", "--run-name", "hangs"),
        *("--hang-timeout", "5s", "--hang-action", "kill", "hangs.py", "out"),
        timeout=150,
    )
    assert hung.returncode == 0, hung.stderr
    remote = f"file://{tmp_path / 'remote'}"
    pushed = accel("sync", "push", remote)
    assert pushed.returncode == 0, pushed.stderr
    # The kill in the middle of step 15's shards may leave that save's temp folder (a
    # crash's debris, which `accel clean` removes): push says it skipped that and only that.
    skipped = [line for line in pushed.stderr.splitlines() if "skipped " in line]
    assert all("/.tmp-000000000015-" in line and "a crash left" in line for line in skipped), (
        pushed.stderr
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pulled = _accel(elsewhere, tmp_path / "home", "sync", "pull", remote)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    verified = _accel(elsewhere, tmp_path / "home", "checkpoints", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    here, there = project / ".accelerate", elsewhere / ".accelerate"
    # Everything arrives but the crash's temp folder push said it skipped (above).
    left = [line.split("skipped checkpoints/", 1)[1].split(":", 1)[0] + "/" for line in skipped]
    kept = {k: v for k, v in _files(here / "checkpoints").items() if not k.startswith(tuple(left))}
    assert _files(there / "checkpoints") == kept
    runs_here, runs_there = _files(here / "logs" / "runs"), _files(there / "logs" / "runs")
    assert runs_there.keys() == runs_here.keys()
    assert any(k.endswith("metrics.jsonl") for k in runs_here)
    assert any("stacks/" in k for k in runs_here)  # the hang's dumped stacks came along
    for name, data in runs_here.items():  # run.json goes up redacted, nothing else changes
        if not name.endswith("run.json"):
            assert runs_there[name] == data, name
