"""The automatic size budget: a no-op under budget, LRU eviction over it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from accel import Workspace
from accel.clean.budget import OFF, OVER, TRIMMED, UNDER, check
from accel.runs import run_lock

DAY = 86400.0


def old_run(ws: Workspace, run_id: str, age_days: float, size: int = 10_000) -> Path:
    folder = ws.runs_dir / run_id
    folder.mkdir(parents=True)
    ended = time.time() - age_days * DAY
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ended))
    record = {"id": run_id, "status": "succeeded", "started_at": stamp, "ended_at": stamp}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "rank-0.log").write_bytes(b"l" * size)
    for path in [*folder.iterdir(), folder]:
        os.utime(path, (ended, ended))
    return folder


def test_no_budget_and_under_budget_do_nothing(ws: Workspace) -> None:
    assert check(ws).action == OFF
    old_run(ws, "20260101-000000-aaaaaa", 30)
    before = sorted(p for p in ws.path.rglob("*"))
    result = check(ws, max_size=10**9)
    assert result.action == UNDER and result.removed == 0
    assert result.size_before == result.size_after > 10_000
    assert sorted(p for p in ws.path.rglob("*")) == before
    assert not (ws.logs_dir / "training.log").exists()


def test_over_budget_evicts_least_recently_used_and_keeps_what_is_protected(
    ws: Workspace,
) -> None:
    ws.cache.put("old", b"o" * 20_000)
    ws.cache.put("new", b"n" * 20_000)
    ws.cache.get("old")  # "new" is now the least recently used entry
    oldest = old_run(ws, "20260101-000000-aaaaaa", 60)
    newer = old_run(ws, "20260201-000000-bbbbbb", 30)
    live = old_run(ws, "20260102-000000-cccccc", 59, size=30_000)
    torch = pytest.importorskip("torch")
    ws.checkpoints.save({"w": torch.zeros(10_000)}, 1)  # about 40 kB, never evicted
    ws.config_file.write_text("version: 1\n")
    with run_lock(ws.layout, live.name):
        total = check(ws, max_size=10**9).size_before
        dry = check(ws, max_size=total - 8_000, dry_run=True)
        assert dry.dry_run and dry.removed >= 1 and oldest.exists()
        result = check(ws, max_size=total - 8_000)
    assert result.action == TRIMMED and result.size_after <= total - 8_000
    assert not oldest.exists()  # 60 days old: first to go
    assert live.exists() and newer.exists() and ws.config_file.exists()
    assert "new" in ws.cache and "old" in ws.cache
    assert [c.step for c in ws.checkpoints.list()] == [1]
    log = (ws.logs_dir / "training.log").read_text()
    assert "size budget" in log and "removed 1 item" in log

    tight = check(ws, max_size=1)
    assert tight.action == OVER and ws.checkpoints.list() and ws.config_file.exists()
    assert "new" not in ws.cache and "old" not in ws.cache and not newer.exists()
