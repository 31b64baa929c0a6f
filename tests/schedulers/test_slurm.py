"""accel under a real SLURM (slurm_cluster.py): the command lines SLURM's users write,
with ``torchrun`` replaced by ``accel launch`` and nothing else changed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from run_helpers import accel_command, wait_for

SCRIPTS = Path(__file__).resolve().parents[1] / "launch" / "scripts"

pytestmark = [pytest.mark.slow, pytest.mark.schedulers]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 180) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=_env(env), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _env(slurm: dict[str, str]) -> dict[str, str]:
    accel_bin = str(Path(accel_command()[0]).parent)  # the venv's accel, on the jobs' PATH
    return {**os.environ, **slurm, "PATH": f"{accel_bin}:{os.environ['PATH']}"}


def _world(out: Path) -> list[tuple[int, int, float]]:
    """(rank, world size, all_reduce of rank + 1) of every rank that env_dump.py ran."""
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    return [(int(r["env"]["RANK"]), int(r["env"]["WORLD_SIZE"]), r["all_reduce"]) for r in ranks]


@pytest.mark.timeout(300)
def test_one_task_per_node_runs_the_nodes_workers(
    slurm: dict[str, str], project: Path, accel_exe: list[str]
) -> None:
    """``srun --ntasks-per-node=1 torchrun --nproc-per-node 2 ...``, as SLURM's docs and
    most cluster guides write it."""
    out = project / "out"
    out.mkdir()
    said = _run(
        ["srun", "--ntasks-per-node=1", "-c", "2", *accel_exe, "launch", "--cpu",
         "--nproc-per-node", "2", str(SCRIPTS / "env_dump.py"), str(out), "--all-reduce"],
        project, slurm,
    )  # fmt: skip
    assert _world(out) == [(0, 2, 3.0), (1, 2, 3.0)]
    assert "slurm: node 0 of 1" in said


@pytest.mark.timeout(300)
def test_srun_tasks_are_the_ranks_of_one_world(
    slurm: dict[str, str], project: Path, accel_exe: list[str]
) -> None:
    """``srun -n 2 accel launch ...``: SLURM starts every rank; each task is one worker of
    one world of 2, not a world of its own."""
    out = project / "out"
    out.mkdir()
    said = _run(
        ["srun", "-n", "2", *accel_exe, "launch", "--cpu", str(SCRIPTS / "env_dump.py"),
         str(out), "--all-reduce"],
        project, slurm,
    )  # fmt: skip
    assert _world(out) == [(0, 2, 3.0), (1, 2, 3.0)]
    assert "slurm: task 0 of 2" in said and "slurm: task 1 of 2" in said
    local = [json.loads(p.read_text())["env"]["LOCAL_RANK"] for p in sorted(out.glob("rank-*"))]
    assert local == ["0", "1"]  # SLURM_LOCALID, as srun gave it, not the agent's 0


@pytest.mark.timeout(300)
def test_two_launches_in_one_allocation_each_run_their_own_job(
    slurm: dict[str, str], project: Path, accel_exe: list[str]
) -> None:
    """A sweep: one allocation, two projects, two launches at once. Both used one
    rendezvous (localhost:29400, id slurm-JOB) and the second failed."""
    accel = " ".join(accel_exe)
    lines = []
    for name in ("a", "b"):
        (project / name / "out").mkdir(parents=True)
        lines.append(
            f"(cd {name} && {accel} launch -n 2 --cpu {SCRIPTS / 'env_dump.py'} out "
            f"--all-reduce > launch.log 2>&1; echo $? > exit) &"
        )
    script = project / "sweep.sh"
    script.write_text("#!/bin/bash\n" + "\n".join(lines) + "\nwait\n")
    _run(["sbatch", "--wait", "-c", "2", "-o", str(project / "sweep.out"), str(script)],
         project, slurm)  # fmt: skip
    for name in ("a", "b"):
        log = (project / name / "launch.log").read_text()
        assert (project / name / "exit").read_text().strip() == "0", log
        assert _world(project / name / "out") == [(0, 2, 3.0), (1, 2, 3.0)], log


@pytest.mark.timeout(400)
def test_scancel_signal_term_saves_requeues_and_the_job_resumes_bit_for_bit(
    slurm: dict[str, str], project: Path, accel_exe: list[str]
) -> None:
    """Preemption as SLURM does it: SIGTERM to the job's steps (``scancel --signal=TERM``;
    a preemption or a time limit sends the same). The workers save the step they are at,
    ``--requeue`` puts the job back in the queue, and the job, started again by SLURM,
    resumes there and ends with the weights of a run never stopped."""
    steps = "60"
    whole = project / "whole"
    whole.mkdir()
    preemptible = SCRIPTS / "preemptible.py"
    accel = " ".join(accel_exe)
    _run([*accel_exe, "launch", "-n", "2", "--cpu", "--run-name", "whole", str(preemptible),
          str(whole), steps], project, slurm)  # fmt: skip
    out = project / "out"
    out.mkdir()
    script = project / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"srun {accel} launch -n 2 --cpu --requeue --run-name pre {preemptible} out {steps}\n"
    )
    log = project / "job.out"
    env = _env(slurm)
    job = _run(["sbatch", "--parsable", "-c", "2", "--open-mode=append", "-o", str(log),
                str(script)], project, slurm).strip()  # fmt: skip
    assert job.isdigit(), job
    wait_for(lambda: _both_past(log, 5), 180, f"both ranks past step 5 in {log}", every=0.5)
    subprocess.run(["scancel", "--signal=TERM", job], env=env, check=True, timeout=30)
    # Requeued: pending again, with one restart (SLURM holds a requeued job 2 minutes
    # before it may start; the test, as an administrator, lets it start now).
    wait_for(lambda: _requeued(_job(job, env)), 120, f"job {job} requeued", every=0.5)
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env,
                   check=True, timeout=30)  # fmt: skip
    wait_for(
        lambda: _job(job, env).get("JobState") == "COMPLETED", 240, f"job {job} to complete", 0.5
    )
    said = log.read_text()
    saved = set(re.findall(r"\[rank\d\] stop asked: saved step (\d+)", said))
    assert len(saved) == 1, said  # both ranks saved one and the same step
    (step,) = saved
    assert f"accel: requeueing SLURM job {job}" in said
    assert said.count(f"resumed at step {step}") == 2, said
    assert json.loads((out / "final.json").read_text()) == json.loads(
        (whole / "final.json").read_text()
    )


def _both_past(log: Path, step: int) -> bool:
    text = log.read_text() if log.exists() else ""
    found = re.findall(r"\[rank(\d)\] step (\d+) done", text)
    return {rank for rank, done in found if int(done) >= step} == {"0", "1"}


def _requeued(fields: dict[str, str]) -> bool:
    return fields.get("Restarts") == "1" and fields.get("JobState") == "PENDING"


def _job(job: str, env: dict[str, str]) -> dict[str, str]:
    """``scontrol show job``'s fields (empty once SLURM forgot the job)."""
    done = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout))
