"""``accel launch --requeue`` (SLURM): refused in one line, before anything starts, where it
cannot work; shown in --dry-run where it can. The real requeue is tests/schedulers."""

from __future__ import annotations

from pathlib import Path

import pytest
from launchutil import dry_run_json

from accel.cli.main import main
from accel.errors import UsageError
from accel.launch.schedulers import requeue_command


def test_outside_slurm_requeue_is_refused_saying_why() -> None:
    with pytest.raises(UsageError, match="SLURM_JOB_ID is not set: run it inside sbatch"):
        requeue_command({}, {"scontrol": "/usr/bin/scontrol"}.get)


def test_without_scontrol_requeue_is_refused_saying_why() -> None:
    with pytest.raises(UsageError, match="scontrol, which is not on PATH"):
        requeue_command({"SLURM_JOB_ID": "12"}, {}.get)


def test_a_job_of_an_array_is_requeued_by_its_array_name() -> None:
    env = {"SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "2"}
    assert requeue_command(env, {"scontrol": "/s/scontrol"}.get) == (
        "/s/scontrol",
        "requeue",
        "10_2",
    )
    assert requeue_command({"SLURM_JOB_ID": "12"}, {"scontrol": "sc"}.get)[-1] == "12"


def test_the_command_line_refuses_in_one_line_with_exit_2(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    (project / "train.py").write_text("")
    assert main(["launch", "--requeue", "train.py"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--requeue needs a SLURM job" in err
    assert not (project / ".accelerate").exists()  # nothing was made


def test_dry_run_shows_what_node_0_runs_when_slurm_stops_the_job(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir = project / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    (project / "train.py").write_text("")
    assert dry_run_json(capsys, "--requeue", "train.py")["requeue"] == [
        str(scontrol),
        "requeue",
        "77",
    ]
    assert dry_run_json(capsys, "train.py")["requeue"] is None
