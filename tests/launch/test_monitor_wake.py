"""The launcher sees a worker end when it ends (issue 28): the sleep of torch's agent
between two checks of its workers waits on the launcher's exit watch, and the wait for a
worker the launcher stops returns at its exit, not at Popen's next poll."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from torch.distributed.elastic.agent.server import api as agent_api

from accel.launch import _torch_compat as compat
from accel.launch.deaths import ExitWatch

pytestmark = pytest.mark.slow  # each starts a process

WAITS_FOR_STDIN = [sys.executable, "-c", "import sys; sys.stdin.read()"]


@pytest.mark.timeout(60)
def test_a_worker_that_ends_wakes_the_agent_before_its_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_api, "time", agent_api.time)
    child = subprocess.Popen(WAITS_FOR_STDIN, stdin=subprocess.PIPE)
    watch = ExitWatch()  # the launcher's: the kernel wakes its thread at the end
    compat.wake_on_exit(watch.ended)
    try:
        watch.watch({0: child.pid})
        assert child.stdin is not None
        child.stdin.close()  # the worker ends...
        agent_api.time.sleep(3600)  # ...and wakes the agent: else the timeout fails this
        assert child.wait(timeout=60) == 0
        assert not watch.ended.is_set()  # woken once; the next sleep is the interval's
    finally:
        compat.wake_on_exit(None)
        child.kill()


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
