"""Checkpoint collectives called on some ranks only fail fast, naming who came (gloo)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from run_helpers import accel
from run_helpers import run_json as _record

SCRIPTS = Path(__file__).parent / "scripts"


def _launch(project: Path, *args: str, arrival: str = "3s") -> subprocess.CompletedProcess[str]:
    env = {"ACCEL_CHECKPOINTS_ARRIVAL_TIMEOUT": arrival}
    return accel(project, "launch", "--stop-grace-period", "2s", *args, env=env)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_save_state_on_the_main_process_only_fails_fast_and_says_why(project: Path) -> None:
    started = time.monotonic()
    done = _launch(project, "-n", "2", str(SCRIPTS / "save_on_some_ranks.py"), "0")
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 60  # not a silent hang
    (last,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert last.startswith(
        "error: rank 0 failed first: CollectiveMismatch: save_state is a collective: every "
        "rank must call it, but only rank(s) 0 of 2 arrived within 3s (missing: 1); call "
        "save_state on every rank, not only on the main process"
    )
    assert "if accelerator.is_main_process: save_state()" in last
    assert "[rank0] accel.errors.CollectiveMismatch: save_state is a collective" in done.stderr
    record = _record(project)
    assert record["failed_rank"] == 0
    assert not list((project / ".accelerate" / "checkpoints").glob("*/step-*"))  # no checkpoint


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_rank_that_waited_fails_with_the_same_line(project: Path) -> None:
    done = _launch(project, "-n", "3", str(SCRIPTS / "save_on_some_ranks.py"), "0,1")
    assert done.returncode == 1
    expected = "only rank(s) 0, 1 of 3 arrived within 3s (missing: 2)"
    logs = project / ".accelerate" / "logs" / "runs"
    (folder,) = logs.iterdir()
    for rank in (0, 1):
        assert expected in (folder / f"rank-{rank}.log").read_text(), rank
    fates = {f["rank"]: f for f in _record(project)["attempts"][-1]["failures"]}  # type: ignore[index]
    waiters = [fates[r] for r in (0, 1)]
    # The first to give up failed; the other either gave up too ("also failed") or was
    # still polling the store when accel began stopping the job ("stopped", seen on torch
    # 2.6 in CI): both logged the same line above.
    first = [f for f in waiters if f["fate"] == "failed"]
    assert len(first) == 1 and first[0]["type"] == "CollectiveMismatch"
    assert {f["fate"] for f in waiters} - {"failed"} <= {"also failed", "stopped"}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_load_state_on_some_ranks_only_fails_fast_too(project: Path) -> None:
    done = _launch(project, "-n", "2", str(SCRIPTS / "save_on_some_ranks.py"), "1", "load")
    assert done.returncode == 1
    assert "load_state is a collective" in done.stderr
    assert "only rank(s) 1 of 2 arrived" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_same_script_saving_on_every_rank_commits(project: Path) -> None:
    done = _launch(project, "-n", "2", str(SCRIPTS / "save_on_some_ranks.py"), "0,1")
    assert done.returncode == 0, done.stderr
    assert list((project / ".accelerate" / "checkpoints" / "default").glob("step-*"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_collective_inside_a_save_is_bounded_by_the_group_timeout(project: Path) -> None:
    done = _launch(project, "-n", "2", str(SCRIPTS / "stall_in_collective.py"))
    assert done.returncode == 1
    assert (
        "error: rank 0 failed first: CollectiveMismatch: a checkpoint collective on rank 0 "
        "waited 1s for the other ranks and gave up (checkpoints.collective_timeout)" in done.stderr
    )
