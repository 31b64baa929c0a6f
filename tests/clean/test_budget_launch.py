"""``accel launch`` checks the size budget when a run ends."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from accel import Workspace

DAY = 86400.0


def launch(project: Path, accel_exe: list[str]) -> subprocess.CompletedProcess[str]:
    (project / "noop.py").write_text("print('worked', flush=True)\n")
    return subprocess.run(
        [*accel_exe, "launch", "-n", "1", "noop.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_run_that_ends_over_budget_evicts_the_least_recently_used(
    project: Path, accel_exe: list[str]
) -> None:
    ws = Workspace.discover().ensure()
    ws.cache.put("recent", b"r" * 20_000)
    stale = ws.cache_dir / "frameworks" / "inductor"
    stale.mkdir(parents=True)
    (stale / "kernel.so").write_bytes(b"k" * 200_000)
    when = time.time() - 30 * DAY
    for path in (stale / "kernel.so", stale):
        os.utime(path, (when, when))

    ws.config_file.write_text("version: 1\ncache:\n  max_size: 10MB\n")
    under = launch(project, accel_exe)
    assert under.returncode == 0, under.stderr
    assert stale.exists() and "size budget" not in under.stderr

    ws.config_file.write_text("version: 1\ncache:\n  max_size: 150KB\n")
    over = launch(project, accel_exe)
    assert over.returncode == 0, over.stderr
    assert not stale.exists() and "recent" in ws.cache
    assert "size budget" in over.stderr
    assert "size budget" in (ws.logs_dir / "training.log").read_text()
    assert len(list(ws.runs_dir.iterdir())) == 2  # both runs' records stay
