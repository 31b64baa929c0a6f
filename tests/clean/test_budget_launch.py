"""``accel launch`` checks the size budget when a run ends."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from accel import Workspace
from run_helpers import Accel

DAY = 86400.0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_run_that_ends_over_budget_evicts_the_least_recently_used(
    project: Path, accel: Accel
) -> None:
    (project / "noop.py").write_text("print('worked', flush=True)\n")
    ws = Workspace.discover().ensure()
    ws.cache.put("recent", b"r" * 20_000)
    stale = ws.cache_dir / "frameworks" / "inductor"
    stale.mkdir(parents=True)
    (stale / "kernel.so").write_bytes(b"k" * 200_000)
    when = time.time() - 30 * DAY
    for path in (stale / "kernel.so", stale):
        os.utime(path, (when, when))

    ws.config_file.write_text("version: 1\ncache:\n  max_size: 10MB\n")
    under = accel("launch", "-n", "1", "noop.py")
    assert under.returncode == 0, under.stderr
    assert stale.exists() and "size budget" not in under.stderr

    ws.config_file.write_text("version: 1\ncache:\n  max_size: 150KB\n")
    over = accel("launch", "-n", "1", "noop.py")
    assert over.returncode == 0, over.stderr
    assert not stale.exists() and "recent" in ws.cache
    assert "size budget" in over.stderr
    assert "size budget" in (ws.logs_dir / "training.log").read_text()
    assert len(list(ws.runs_dir.iterdir())) == 2  # both runs' records stay
