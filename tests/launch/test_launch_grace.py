"""The grace period holds on every path torch stops workers by, on every supported release.

torch closes workers with a fixed 30 s wait, through a private method whose signature
changed between releases (accel/launch/_torch_compat.py); accel gives its own.
"""

from __future__ import annotations

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
