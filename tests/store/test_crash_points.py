"""SIGKILL at every step of a multi-step commit: re-saving a checkpoint, replacing and
deleting a cache entry. A child process passes named points between its filesystem
operations (``accel._faults``); one uninterrupted run lists them all, then one child per
point kills itself exactly there and the parent checks what a reader sees."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.clean import clean
from accel.store import entry as entry_mod

from . import workers

Ctx = multiprocessing.context.BaseContext
LATER = 3600.0  # past clean's grace period for debris


def _points(fork: Ctx, index: int | None, action: Any, *args: Any) -> list[str] | None:
    """Run ``action`` in a child that dies at point ``index``; the points it passed
    (None when it was killed, as it must be)."""
    queue = fork.Queue()
    child = workers.process(fork, workers.at_points, index, queue, action, *args)
    child.start()
    code = workers.finish(child, timeout=60)
    if index is None:
        assert code == 0
        return list(queue.get(timeout=5))
    assert code == -signal.SIGKILL, f"the child was not killed at point {index} ({code})"
    return None


def _child(fork: Ctx, action: Any, *args: Any) -> None:
    """``action`` in a process of its own: the parent never holds a series lease."""
    child = workers.process(fork, action, *args)
    child.start()
    assert workers.finish(child, timeout=60) == 0


def _fresh(tmp_path: Path, name: str, keep_last: int | None) -> Workspace:
    ws = Workspace(tmp_path / name / ".accelerate").ensure()
    if keep_last is not None:
        ws.config_file.write_text(f"checkpoints:\n  keep_last: {keep_last}\n")
    return Workspace(ws.path)


_REAL_TIME = time.time


def _in_two_minutes() -> float:
    return _REAL_TIME() + 120


def _value(ws: Workspace, step: int) -> float:
    loaded = ws.checkpoints.load(step)["model"]["w"]
    assert torch.equal(loaded, torch.full_like(loaded, loaded[0]))  # never a mix
    return float(loaded[0])


# -- re-saving a checkpoint ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kill_at_every_step_of_a_resave_keeps_one_whole_copy(tmp_path: Path, fork: Ctx) -> None:
    """keep_last 1 and one checkpoint: re-saving it must never leave none."""
    ws = _fresh(tmp_path, "record", keep_last=1)
    _child(fork, workers.resave, str(ws.path), 7, 1.0)
    seen = _points(fork, None, workers.resave, str(ws.path), 7, 2.0)
    assert seen is not None and _value(ws, 7) == 2.0
    for step in ("swap.old-moved-aside", "swap.new-in-place", "retire.detached"):
        assert step in seen, seen
    assert seen.count("remove.unlinked") >= 3  # data, manifest and marker go one by one
    for index, point in enumerate(seen):
        ws = _fresh(tmp_path, f"kill-{index}", keep_last=1)
        _child(fork, workers.resave, str(ws.path), 7, 1.0)
        _points(fork, index, workers.resave, str(ws.path), 7, 2.0)
        reader = Workspace(ws.path).checkpoints
        assert [i.step for i in reader.list()] == [7], point
        before = _value(Workspace(ws.path), 7)
        assert before in (1.0, 2.0), point
        ws.config_file.write_text("checkpoints:\n  keep_last: 2\n")
        _child(fork, workers.resave, str(ws.path), 8, 3.0)  # finishes what was cut short
        after = Workspace(ws.path)
        assert _value(after, 7) == before, f"step 7 changed copy while recovering ({point})"
        clean(after, now=time.time() + LATER)
        assert after.checkpoints.debris() == [], point
        assert [i.step for i in after.checkpoints.list()] == [7, 8]
        assert len(os.listdir(after.checkpoints.series_dir())) == 2, point


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_resave_killed_at_random_instants_never_loses_the_step(
    ws: Workspace, fork: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "1")
    rng = random.Random(20261130)
    _child(fork, workers.resave, str(ws.path), 3, 0.0)
    last = 0.0
    for _ in range(30):
        child = workers.process(fork, workers.resave_forever, str(ws.path), 3, int(last) + 1)
        child.start()
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join()
        reader = Workspace.discover().checkpoints
        assert [i.step for i in reader.list()] == [3]
        value = float(reader.load(3)["model"]["w"][0])
        assert value >= last  # never an older copy once a newer one was visible
        last = value
    assert last > 0


# -- the cache -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("new", [b"new bytes", {"w": "tensors"}, "file"], ids=str)
def test_a_kill_at_every_step_of_a_put_leaves_the_old_or_the_new_value(
    tmp_path: Path, fork: Ctx, new: Any
) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"new file")
    value = {"w": torch.ones(4)} if isinstance(new, dict) else source if new == "file" else new
    ws = _fresh(tmp_path, "record", None)
    ws.cache.put("k", b"old")
    seen = _points(fork, None, workers.put_value, str(ws.path), "k", value)
    assert seen is not None and "cache.put.meta-written" in seen
    for index, point in enumerate(seen):
        ws = _fresh(tmp_path, f"kill-{index}", None)
        ws.cache.put("k", b"old")
        _points(fork, index, workers.put_value, str(ws.path), "k", value)
        got = ws.cache.get("k")  # never an error, never a miss
        if isinstance(got, Path):
            assert got.read_bytes() == b"new file", point
        elif isinstance(got, dict):
            assert torch.equal(got["w"], torch.ones(4)), point
        else:
            assert got in (b"old", new), point
        ws.cache.put("k", b"again")  # the next put works and tidies the entry
        assert ws.cache.get("k") == b"again"
        clean(ws, now=time.time() + LATER)
        assert ws.cache.debris() == [] and os.listdir(ws.tmp_dir) == [], point
        with pytest.MonkeyPatch.context() as later:  # past the minute a replaced file stays
            later.setattr(entry_mod.time, "time", _in_two_minutes)
            ws.cache.put("k", b"later")
        versions = [n for n in os.listdir(ws.cache.entry_dir("k")) if n.startswith("v")]
        assert len(versions) == 1, point


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kill_at_every_step_of_a_delete_never_shows_a_damaged_entry(
    tmp_path: Path, fork: Ctx
) -> None:
    ws = _fresh(tmp_path, "record", None)
    ws.cache.put("ns/k", {"w": torch.arange(8.0)})
    seen = _points(fork, None, workers.delete_key, str(ws.path), "ns/k")
    assert seen is not None and "cache.delete.detached" in seen
    for index, point in enumerate(seen):
        ws = _fresh(tmp_path, f"kill-{index}", None)
        ws.cache.put("ns/k", {"w": torch.arange(8.0)})
        _points(fork, index, workers.delete_key, str(ws.path), "ns/k")
        got = ws.cache.get("ns/k")
        assert got is None or torch.equal(got["w"], torch.arange(8.0)), point
        leftovers = [p for p in (ws.cache_dir / "entries" / "ns").iterdir() if p.name != "k.entry"]
        for left in leftovers:  # what is half-deleted still proves it is accel's
            assert (left / ".accel-owned").exists() or not os.listdir(left), point
        clean(ws, now=time.time() + LATER)
        left = sorted(os.listdir(ws.cache_dir / "entries" / "ns"))
        if left:  # the delete was killed before it began: the entry is whole
            assert left == ["k.entry"] and got is not None, point
            assert torch.equal(ws.cache.get("ns/k")["w"], torch.arange(8.0)), point


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_deleting_a_step_caught_mid_resave_deletes_both_copies(tmp_path: Path, fork: Ctx) -> None:
    ws = _fresh(tmp_path, "ws", keep_last=None)
    _child(fork, workers.resave, str(ws.path), 4, 1.0)
    seen = _points(fork, None, workers.resave, str(ws.path), 4, 2.0)
    assert seen is not None
    ws = _fresh(tmp_path, "mid", keep_last=None)
    _child(fork, workers.resave, str(ws.path), 4, 1.0)
    _points(fork, seen.index("swap.old-aside-durable"), workers.resave, str(ws.path), 4, 2.0)
    reader = Workspace(ws.path).checkpoints
    assert reader.view().swaps and _value(Workspace(ws.path), 4) == 2.0  # the new copy
    assert reader.delete(4) is True
    assert reader.list() == [] and reader.get(4) is None


# -- persisting the memory tier ----------------------------------------------------------------


def _snapshot(tier: Path, step: int, series: str) -> None:
    """Two ranks' whole snapshots of ``step`` in ``tier``, as their workers write them."""
    from accel.store import memtier

    for rank in (0, 1):
        trees = {
            name: {"model": {"w": torch.full((16,), float(step))}, "rank": rank}
            for name in memtier.files_of(rank)
        }
        memtier.SlotWriter(tier, rank, 2).write(step, series, trees)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kill_at_every_step_of_a_persist_leaves_the_checkpoint_whole_or_absent(
    tmp_path: Path, fork: Ctx
) -> None:
    """The launcher killed while it commits a failure's snapshot (keep_last 1, step 6 on
    disk): step 7 is listed whole or not at all, step 6 is never lost before 7 is there,
    and the next launch's persist finishes the job from the same slots."""
    from accel.store import memtier

    def fresh(name: str) -> tuple[Workspace, Path]:
        ws = _fresh(tmp_path, name, keep_last=1)
        _child(fork, workers.resave, str(ws.path), 6, 6.0)
        tier = tmp_path / name / "tier"
        tier.mkdir()
        _snapshot(tier, 7, ws.checkpoints.series_name)  # the series step 6 is in
        return ws, tier

    ws, tier = fresh("record")
    seen = _points(fork, None, workers.persist_newest, str(ws.path), str(tier), 2)
    assert seen is not None and seen.count("persist.copied") == 3, seen
    for point in ("commit.manifest-written", "commit.renamed", "retire.detached"):
        assert point in seen, seen
    assert [i.step for i in Workspace(ws.path).checkpoints.list()] == [7]
    for index, point in enumerate(seen):
        ws, tier = fresh(f"kill-{index}")
        _points(fork, index, workers.persist_newest, str(ws.path), str(tier), 2)
        reader = Workspace(ws.path).checkpoints
        steps = [i.step for i in reader.list()]
        assert steps in ([6], [6, 7], [7]), (point, steps)
        assert reader.unreadable() == [], point  # no step folder without its manifest
        if 7 in steps:  # whole: every file verified against the manifest
            assert _value(Workspace(ws.path), 7) == 7.0, point
            assert reader.load_rank_state(7, 1)["rank"] == 1, point
        else:
            assert _value(Workspace(ws.path), 6) == 6.0, point
        assert list(memtier.common_steps(tier, 2)) == [7], point  # the slots untouched
        _child(fork, workers.persist_newest, str(ws.path), str(tier), 2)
        after = Workspace(ws.path)
        assert [i.step for i in after.checkpoints.list()] == [7], point
        assert _value(after, 7) == 7.0, point
        clean(after, now=time.time() + LATER)
        assert after.checkpoints.debris() == [], point
        assert len(os.listdir(after.checkpoints.series_dir())) == 1, point
