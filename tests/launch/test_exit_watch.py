"""The exit watch sees every end before blame reads it, however late its thread runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from accel.launch._ends import rank_ends
from accel.launch.blame import blame
from accel.launch.deaths import ExitWatch
from accel.runs.failures import BY_FAILURE, FAILED, STOPPED, Stop


def _late_clock() -> float:
    time.sleep(0.5)  # a watch thread that a loaded machine schedules late
    return time.time()


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_a_stopped_rank_has_its_time_of_death_even_if_torch_reaped_it_first() -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watch = ExitWatch(clock=_late_clock)
    watch.watch({0: worker.pid})
    stopped_at = time.time()
    os.kill(worker.pid, signal.SIGTERM)
    worker.wait()  # torch's Popen reaps it before blame runs
    (end,) = rank_ends(0, {}, {0: worker.pid}, watch)
    # Without a time of death, blame falls back on torch's timestamp, truncated to the
    # second, which puts a rank accel stopped before the rank that really failed.
    assert end.died_at is not None and end.died_at >= stopped_at


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_settle_is_bounded_while_a_worker_still_runs() -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch = ExitWatch()
        watch.watch({0: worker.pid})
        started = time.monotonic()
        watch.settle(0.3)
        assert time.monotonic() - started < 5 and watch.exits() == {}
    finally:
        worker.kill()
        worker.wait()


class _StarvedWatch:
    """A clock whose watch threads do not run until released: a loaded machine that
    wakes the thread of a dead worker only after the launcher began stopping the rest."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self) -> float:
        if threading.current_thread().name.startswith("accel-exit-watch-"):
            self.release.wait(20)
        return time.time()


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_rank_dead_before_the_stop_is_blamed_even_if_its_watch_runs_after_it() -> None:
    # The hog run of 26bfdfb: rank 1 SIGKILLed, rank 0 raised "Connection closed by
    # peer", and rank 1's watch thread stamped its death 0.4 ms after the stop began:
    # blamed on rank 0, rank 1 "stopped by accel (SIGKILL)". What the kernel already
    # knows when the stop begins is read then, in the launcher's own thread.
    clock = _StarvedWatch()
    ranks = {0: _sleeper(), 1: _sleeper()}
    try:
        watch = ExitWatch(clock=clock)
        watch.watch({rank: proc.pid for rank, proc in ranks.items()})
        os.kill(ranks[1].pid, signal.SIGKILL)  # what the OOM killer does
        os.waitid(os.P_PID, ranks[1].pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
        stop = Stop(watch.stopping(), BY_FAILURE)  # the launcher begins stopping the rest
        ranks[0].terminate()
        for proc in ranks.values():
            proc.wait()  # torch's Popen reaps them
        clock.release.set()
        verdict = blame(rank_ends(0, {}, {r: p.pid for r, p in ranks.items()}, watch), stop)
    finally:
        clock.release.set()
        for proc in ranks.values():
            proc.kill()
            proc.wait()
    fates = {f.rank: f.fate for f in verdict.failures}
    assert fates == {1: FAILED, 0: STOPPED}
    assert verdict.first is not None and verdict.first.exitcode == -9
