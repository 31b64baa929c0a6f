"""SIGKILL a clean at every step of its removals: nothing it leaves looks valid but is
not, nothing it keeps is touched, and the next clean finishes the job."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from clean_factory import DAY, age_tree, checkpoint, entry, run, workspace

from accel import _faults
from accel.clean import clean
from accel.runs import read_record, records_this_run
from accel.training_log import format_line
from accel.workspace import Workspace

FORK = multiprocessing.get_context("fork")


def _populate(project: Path) -> Workspace:
    ws, now = workspace(project), time.time()
    checkpoint(ws, "main", 1, created=now - 9 * DAY, size=3000)
    checkpoint(ws, "main", 2, created=now)
    entry(ws, "old/a", created=now - 9 * DAY, size=500)
    entry(ws, "fresh", created=now)
    age_tree(run(ws, "20200101-000000-aaaaaa", started="2020-01-01T00:00:00+00:00"), now - 9 * DAY)
    log = ws.logs_dir / "training.log.1"
    log.write_text(format_line("old", "info", command="accel", now=now - 9 * DAY))
    os.utime(log, (now - 9 * DAY, now - 9 * DAY))
    return ws


def _clean_in_child(ws_path: str, index: int | None, queue: Any) -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def hook(name: str) -> None:
        with lock:
            seen.append(name)
            if index is not None and len(seen) - 1 == index:
                os.kill(os.getpid(), signal.SIGKILL)

    _faults.set_hook(hook)
    clean(Workspace(ws_path), older_than="1d")
    queue.put(seen)


def _run_clean(ws: Workspace, index: int | None) -> list[str] | None:
    queue = FORK.Queue()
    child = FORK.Process(target=_clean_in_child, args=(str(ws.path), index, queue))
    child.start()
    child.join(60)
    if index is None:
        assert child.exitcode == 0
        return list(queue.get(timeout=5))
    assert child.exitcode == -signal.SIGKILL
    return None


def _no_lies(ws: Workspace) -> None:
    """Whatever a reader sees is whole: valid, or absent."""
    ckpts = ws.checkpoints
    assert [i.step for i in ckpts.list("main")][-1] == 2
    for info in ckpts.list("main"):
        for name in info.files:
            assert (info.path / name).stat().st_size == (3000 if info.step == 1 else 100)
    assert ws.cache.get("old/a") in (None, b"x" * 500)
    assert ws.cache.get("fresh") == b"x" * 100
    folder = ws.runs_dir / "20200101-000000-aaaaaa"
    if folder.exists():
        assert records_this_run(read_record(folder), folder)
        assert (folder / "rank-0.log").read_text() == "hello\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_clean_killed_at_every_step_leaves_nothing_half_valid(tmp_path: Path) -> None:
    seen = _run_clean(_populate(tmp_path / "record"), None)
    assert seen is not None and seen.count("clean.detached") == 2, seen  # the entry, the run
    assert "retire.detached" in seen  # the checkpoint, by the series' own protocol
    for index, point in enumerate(seen):
        ws = _populate(tmp_path / f"kill-{index}")
        _run_clean(ws, index)
        _no_lies(ws)
        clean(ws, older_than="1d", now=time.time() + 3600)  # past the debris grace
        _no_lies(ws)
        assert [i.step for i in ws.checkpoints.list("main")] == [2], point
        assert (
            ws.cache.get("old/a") is None and not (ws.runs_dir / "20200101-000000-aaaaaa").exists()
        )
        assert not (ws.logs_dir / "training.log.1").exists(), point
        leftovers = [
            p
            for folder in (ws.checkpoints_dir / "main", ws.cache_dir / "entries", ws.runs_dir)
            for p in folder.rglob(".del-*")
        ]
        assert leftovers == [] and os.listdir(ws.tmp_dir) == [], point
        assert json.loads((ws.path / "layout.json").read_text())["layout_version"] == 1
