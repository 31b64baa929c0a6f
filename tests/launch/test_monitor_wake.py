"""The launcher sees a worker end when it ends (issue 28): the sleep of torch's agent
between two checks of its workers waits on the workers' pidfds, and the wait for a
worker the launcher stops returns at its exit, not at Popen's next poll."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from accel.launch import _torch_compat as compat

pytestmark = pytest.mark.slow  # each starts a process

WAITS_FOR_STDIN = [sys.executable, "-c", "import sys; sys.stdin.read()"]


@pytest.mark.timeout(60)
def test_a_worker_that_ends_wakes_the_agent_before_its_interval() -> None:
    child = subprocess.Popen(WAITS_FOR_STDIN, stdin=subprocess.PIPE)
    fds = len(os.listdir("/proc/self/fd"))
    wake = compat._Wake()
    try:
        wake.watch([child.pid])
        assert child.stdin is not None
        child.stdin.close()  # the worker ends...
        wake.sleep(3600)  # ...and wakes the agent: without it, the timeout fails this test
        assert child.wait(timeout=60) == 0
        assert wake._fds == []  # woken once; the next sleep is the interval's
    finally:
        wake.watch(())
        child.kill()
    assert len(os.listdir("/proc/self/fd")) == fds - 1  # the pipe closed, no pidfd kept


@pytest.mark.timeout(60)
def test_the_wait_for_a_stopped_worker_keeps_popens_meaning() -> None:
    child = subprocess.Popen(WAITS_FOR_STDIN, stdin=subprocess.PIPE)
    try:
        compat.wait_on_pidfd(child)
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.01)  # alive: the timeout holds
        child.terminate()
        assert child.wait(timeout=3600) == -signal.SIGTERM  # returns at its end
        assert child.wait(timeout=1) == -signal.SIGTERM  # and again, as Popen does
    finally:
        child.kill()
        if child.stdin is not None:
            child.stdin.close()
