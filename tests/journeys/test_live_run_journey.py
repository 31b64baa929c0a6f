"""Journey: a live 2-rank ``accel launch`` of an ``accel.Accelerator`` script saving at
every step with ``keep_last: 2``, while the user exports, verifies, cleans and pushes
with the real CLI; then the run is released, ends, and a second push, a pull into
another project and a verify there all succeed (issue 23).

Every wait is on an event (a committed checkpoint, the run's end), never on a delay.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import run_helpers
from accel import Workspace

TRAINER = Path(__file__).resolve().parent / "scripts" / "live_trainer.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    """The output of a finished command that must have exited 0."""
    text = f"{done.args}\n{done.stdout}{done.stderr}"
    assert done.returncode == 0, text
    return text


def _remote_files(remote: Path) -> set[str]:
    return set(json.loads((remote / "accel-sync.json").read_text())["files"])


def test_a_live_run_against_export_verify_clean_and_sync(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    release, remote = tmp_path / "release", tmp_path / "remote"
    url = f"file://{remote}"
    ws = Workspace(project / ".accelerate")
    launch = run_helpers.start(project, "launch", "-n", "2", str(TRAINER), str(release))
    try:
        run_helpers.wait_for(
            lambda: launch.poll() is not None or bool(ws.checkpoints.list()),
            240,
            "the live run's first committed checkpoint",
        )
        assert launch.poll() is None, launch.communicate()
        (run_dir,) = ws.runs_dir.iterdir()
        unit = f"logs/runs/{run_dir.name}"

        text = _ok(run_helpers.accel(project, "checkpoints", "export", "-o", "model.safetensors"))
        assert "damaged" not in text
        assert (project / "model.safetensors").stat().st_size > 0
        _ok(run_helpers.accel(project, "checkpoints", "verify"))

        _ok(run_helpers.accel(project, "clean", "--older-than", "0s", "--yes"))
        assert (run_dir / "run.json").exists() or (run_dir / "launcher.log").exists()
        assert run_dir.is_dir() and ws.checkpoints.list(), "clean took the live run's files"
        assert launch.poll() is None, "the run did not survive clean"

        text = _ok(run_helpers.accel(project, "sync", "push", url))
        assert f"skipped {unit}: live run: pushed after it ends" in text
        assert "not sent" not in text
        sent = _remote_files(remote)
        assert not any(rel.startswith(unit) for rel in sent)
        manifests = [
            r for r in sent if r.startswith("checkpoints/") and r.endswith("manifest.json")
        ]
        # Retention may retire one while it streams: then push says so, truthfully.
        assert manifests or "removed here while" in text, text
        assert launch.poll() is None
    finally:
        release.touch()
        out, err = launch.communicate(timeout=180)
    assert launch.returncode == 0, out + err
    assert json.loads((run_dir / "run.json").read_text())["status"] == "succeeded"

    text = _ok(run_helpers.accel(project, "sync", "push", url))
    assert "skipped" not in text, text
    sent = _remote_files(remote)
    assert f"{unit}/run.json" in sent
    here = [i.step for i in ws.checkpoints.list()]
    assert len(here) == 2
    assert {f"checkpoints/default/step-{s:012d}/manifest.json" for s in here} <= sent

    other = tmp_path / "other"
    other.mkdir()
    elsewhere = str(other / ".accelerate")
    _ok(run_helpers.accel(other, "--workspace", elsewhere, "sync", "pull", url))
    _ok(run_helpers.accel(other, "--workspace", elsewhere, "checkpoints", "verify"))
    # The remote keeps what the first push sent, also what retention retired here since.
    pulled = {i.step: i.files for i in Workspace(other / ".accelerate").checkpoints.list()}
    on_remote = {r.split("/")[2] for r in sent if r.startswith("checkpoints/")}
    assert {f"step-{s:012d}" for s in pulled} == on_remote
    assert all(pulled[i.step] == i.files for i in ws.checkpoints.list())
    assert (other / ".accelerate" / "logs" / "runs" / run_dir.name / "run.json").exists()
