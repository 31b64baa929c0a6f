"""accel.hang: the pure decision, activity sources, and stack dumps of real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel import _worker_hooks, hang

HANG_PY = Path(_worker_hooks.__file__)

# The worker side as the launcher's bootstrap uses it: accel/_worker_hooks.py loaded by
# path, accel itself never imported.
WORKER = textwrap.dedent(
    f"""
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("_accel_hang", {str(HANG_PY)!r})
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = mod.install_stack_dump_handler()

    def stuck_in_data_loading():
        # Ready only from in here: a dump sent on this line must find this function.
        print(path, "accel" in sys.modules, flush=True)
        time.sleep(60)

    stuck_in_data_loading()
    """
)


def test_check_hang_is_quiet_until_every_rank_is_quiet_for_the_timeout() -> None:
    assert hang.check_hang({0: 100.0, 1: 50.0}, since=0.0, now=104.0, timeout=5) is None
    verdict = hang.check_hang({0: 100.0, 1: 50.0}, since=0.0, now=106.0, timeout=5)
    assert verdict is not None and verdict.idle == 6.0 and verdict.quiet == {0: 6.0, 1: 56.0}
    assert "6s" in verdict.message and "5s" in verdict.message
    # Activity before watching began (a previous attempt) does not count.
    assert hang.check_hang({0: 10.0}, since=100.0, now=104.0, timeout=5) is None
    assert hang.check_hang({}, since=100.0, now=105.0, timeout=5) is not None
    assert hang.check_hang({}, since=0.0, now=1e9, timeout=0) is None


def test_last_activity_takes_the_newest_of_output_heartbeat_and_metrics(tmp_path: Path) -> None:
    def touch(path: Path, t: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.utime(path, (t, t))

    touch(tmp_path / "rank-0.log", 100)
    touch(tmp_path / "rank-1.log", 100)
    touch(hang.heartbeat_file(tmp_path, 1), 300)
    assert hang.last_activity(tmp_path, [0, 1, 2]) == {0: 100, 1: 300}
    touch(tmp_path / "metrics.jsonl", 200)
    assert hang.last_activity(tmp_path, [0, 1, 2]) == {0: 200, 1: 300, 2: 200}
    assert hang.last_activity(tmp_path, [0], output={0: 400.0}) == {0: 400.0}


def test_heartbeat_touches_the_rank_file_only_under_a_run(tmp_path: Path) -> None:
    hang.heartbeat({})
    env = {"ACCEL_RUN_DIR": str(tmp_path), "RANK": "3"}
    hang.heartbeat(env)
    path = hang.heartbeat_file(tmp_path, 3)
    os.utime(path, (1, 1))
    hang.heartbeat(env)
    assert path.stat().st_mtime > 1


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "ACCEL_RUN_DIR": str(tmp_path), "RANK": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first == [str(hang.stacks_file(tmp_path, 1)), "False"]
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_dump_stacks_names_the_function_and_spares_processes_without_the_handler(
    tmp_path: Path, worker: subprocess.Popen[str], bystander: subprocess.Popen[str]
) -> None:
    stacks = hang.dump_stacks(tmp_path, {1: worker.pid, 5: bystander.pid, 7: 2**22 + 7})
    assert "stuck_in_data_loading" in stacks[1] and "most recent call first" in stacks[1]
    assert "does not dump stacks" in stacks[5] and "gone" in stacks[7]
    assert worker.poll() is None and bystander.poll() is None
    again = hang.dump_stacks(tmp_path, {1: worker.pid})
    assert again[1].count("stuck_in_data_loading") == 1  # only the new dump, not the old


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_hang_watch_dumps_stacks_into_the_rank_log_once_per_quiet_period(
    tmp_path: Path, worker: subprocess.Popen[str]
) -> None:
    events: list[hang.HangEvent] = []
    watch = hang.HangWatch(tmp_path, lambda: {1: worker.pid}, timeout=0.5, on_hang=events.append)
    watch.start()
    try:
        _wait_for(lambda: bool(events))
        log = (tmp_path / "rank-1.log").read_text()
        assert "hang detected" in log and "stuck_in_data_loading" in log
        assert watch.hung and "stuck_in_data_loading" in events[0].stacks[1]
        time.sleep(1.0)  # quiet on: no second alert for the same quiet period
        assert len(events) == 1
        hang.heartbeat({"ACCEL_RUN_DIR": str(tmp_path), "RANK": "1"})
        _wait_for(lambda: len(events) == 2)
    finally:
        watch.stop()
    assert worker.poll() is None


def _wait_for(condition: object, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_a_stack_dump_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    from accel.hang.dump import append_to_rank_logs

    (tmp_path / "rank-0.log").write_bytes(b"before\n[stderr]  45%|####")  # a bar left open
    append_to_rank_logs(tmp_path, {0: "stack of rank 0", 1: "stack of rank 1"}, "hang")
    zero = (tmp_path / "rank-0.log").read_text().splitlines()
    assert zero[:2] == ["before", "[stderr]  45%|####"]
    assert zero[2].startswith("===== accel: hang at ") and zero[3] == "stack of rank 0"
    assert (tmp_path / "rank-1.log").read_text().startswith("===== accel: hang at ")
