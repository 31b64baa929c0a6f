"""The grace period holds on every path torch stops workers by, on every supported release.

torch closes workers with a fixed 30 s wait, through a private method whose signature
changed between releases (accel/launch/_torch_compat.py); accel gives its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import SCRIPTS, assert_no_orphans, pid_alive, run_json

Accel = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_failure_stops_a_rank_that_ignores_sigterm_after_the_grace_period(
    accel: Accel, project: Path
) -> None:
    out = project / "out"
    out.mkdir()
    started = time.monotonic()
    done = accel(
        "launch",
        "-n",
        "2",
        "--stop-grace-period",
        "1s",
        str(SCRIPTS / "sleeper.py"),
        str(out),
        "--fail-rank",
        "0",
        "--ignore-term-rank",
        "1",
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rank 0 failed first: RuntimeError: deliberate failure on rank 0" in done.stderr
    assert elapsed < 25, f"rank 1 was given {elapsed:.0f}s, not the 1s grace period"
    record = run_json(project)
    assert record["status"] == "failed" and record["failed_rank"] == 0
    assert_no_orphans(record["id"])
    worker, child = map(int, (out / "ready-1").read_text().split())
    assert not pid_alive(worker) and not pid_alive(child)


class _Context:
    """A process context whose close receives ``signals`` (real ones, to this process)."""

    def __init__(self, *signals: signal.Signals) -> None:
        self.signals = signals
        self.closed: list[tuple[object, object]] = []
        self.waited = 0  # closes that got to the end of their wait

    def pids(self) -> dict[int, int]:
        return {}

    def close(self, death_sig: object = None, timeout: object = None) -> None:
        self.closed.append((death_sig, timeout))
        for sig in self.signals:
            os.kill(os.getpid(), sig)  # handled before kill() returns (the main thread)
        self.waited += 1


def test_a_signal_during_the_wait_neither_restarts_it_nor_is_lost() -> None:
    from accel.launch._host import Signalled, signals_raise
    from accel.launch._torch_compat import close_with_grace

    stopping: list[object] = []
    pcontext = _Context(signal.SIGTERM, signal.SIGTERM)
    close_with_grace(pcontext, 7, before=stopping.append)
    with signals_raise():  # as while a run's agent runs: torch's handlers raise too
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        # a close for a failure: the signals that came end the run once the wait is over
        with pytest.raises(Signalled) as ended:
            pcontext.close()
        assert ended.value.signum == signal.SIGTERM
        assert pcontext.closed == [(None, 7)] and pcontext.waited == 1  # not cut short
        assert stopping == [None]
        # a close for a signal: torch raises that one again itself
        try:
            raise Signalled(signal.SIGINT)
        except Signalled:
            pcontext.close(signal.SIGINT)
        assert pcontext.closed[-1] == (signal.SIGINT, 7) and stopping[-1] == signal.SIGINT
        assert {sig: signal.getsignal(sig) for sig in before} == before  # handlers given back
