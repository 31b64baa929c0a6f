"""Preemption: a scheduler's SIGTERM (or SLURM's ``--signal=USR1@90``) to the launcher
ends the job with a checkpoint of the step it was in, and the job started again goes
on bit for bit. (SIGUSR1 to a worker stays the stack dump's: test_blame_quiet.)"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS

import run_helpers
from run_helpers import Accel

SCRIPT = str(SCRIPTS / "preemptible.py")
STEPS = "60"


def launch_and_signal(
    accel_exe: list[str], project: Path, out: Path, signum: int
) -> tuple[int, str]:
    """Start the job, signal the launcher once both ranks are past step 5; exit, output."""
    proc = subprocess.Popen(
        [*accel_exe, "launch", "-n", "2", "--cpu", "--run-name", "pre",
         "--stop-grace-period", "30s", SCRIPT, str(out), STEPS],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines, past = [], set()
    for line in proc.stdout:  # an event: both ranks printed step 5
        lines.append(line)
        found = re.match(r"\[rank(\d)\] step (\d+) done", line)
        if found and int(found.group(2)) >= 5:
            past.add(found.group(1))
        if len(past) == 2:
            proc.send_signal(signum)
            break
    rest, _ = proc.communicate(timeout=120)
    return proc.returncode, "".join(lines) + rest


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The uninterrupted job's final weights: one launch per module and test process, in
    a project and HOME of its own (both signals' cases compare against it)."""
    project = tmp_path_factory.mktemp("whole")
    done = subprocess.run(
        [*run_helpers.accel_command(), "launch", "-n", "2", "--cpu", "--run-name", "whole",
         SCRIPT, str(project), STEPS],
        cwd=project, env=run_helpers.alone_env(project), capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((project / "final.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2], ids=["TERM", "USR1", "USR2"]
)
def test_a_stop_asked_saves_the_step_and_the_job_goes_on_bit_for_bit(
    accel: Accel, accel_exe: list[str], project: Path, signum: int, whole: Any
) -> None:
    out = project / "out"
    out.mkdir()
    code, said = launch_and_signal(accel_exe, project, out, signum)
    saved = {int(s) for s in re.findall(r"\[rank\d\] stop asked: saved step (\d+)", said)}
    assert len(saved) == 1, said  # both ranks saved one and the same step
    (step,) = saved
    assert 5 <= step < int(STEPS) and not (out / "final.json").exists()
    assert code == 143, said  # SLURM's early warning stops the job as SIGTERM does
    series = project / ".accelerate" / "checkpoints" / "pre"
    assert (series / f"step-{step:012d}").is_dir()
    again = accel("launch", "-n", "2", "--cpu", "--run-name", "pre", SCRIPT, str(out), STEPS)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed at step {step}" in again.stdout
    assert json.loads((out / "final.json").read_text()) == whole
