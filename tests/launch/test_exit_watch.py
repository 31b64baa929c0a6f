"""The exit watch sees every end before blame reads it, however late its thread runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from accel.launch._ends import rank_ends
from accel.launch.deaths import ExitWatch


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
