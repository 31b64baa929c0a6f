"""A restart maps the checkpoint committed at a failure from the memory tier (issue 28),
and the launcher's copy of a snapshot to disk goes around the page cache."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from accel import _fs
from accel.store import memtier
from accel.store.manifest import STATE_TENSORS
from accel.store.persister import COMMITTING, Persister, release, tier_copy
from accel.workspace import Workspace
from run_helpers import tiny_tmpfs

from .test_memtier import tier, write


def _restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> tuple[Path, Persister]:
    """Step 5 whole on both ranks, step 6 on rank 0 only, the launcher at a failure; this
    process is then a restarted worker (the tier in its environment)."""
    folder = tier(tmp_path, monkeypatch)
    write(folder, 0, 5)
    write(folder, 1, 5)
    write(folder, 0, 6)
    persister = Persister(folder, ws.checkpoints.commit_files, 2, None, run_id="run-1")
    assert persister.persist_newest() == 5
    assert persister.clear(keep=persister.newest)
    monkeypatch.setenv(memtier.DIR_ENV, str(folder))
    return folder, persister


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.unlink()  # the tier's files may be linked elsewhere: a new inode
    path.write_bytes(bytes(data))


def test_the_step_committed_at_a_failure_is_loaded_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    import torch

    folder, _ = _restarted(tmp_path, monkeypatch, ws)
    assert not (folder / "rank-0").exists() and not (folder / "rank-1").exists()
    assert sorted(p.name for p in (folder / memtier.RESTORE).iterdir()) == ["rank-0", "rank-1"]
    store = ws.checkpoints
    found = store.view("main").checkpoints[-1]
    assert tier_copy(found, STATE_TENSORS) == folder / "restore" / "rank-0" / STATE_TENSORS
    assert tier_copy(found, "rank-1.tensors") == folder / "restore" / "rank-1" / "rank-1.tensors"
    assert tier_copy(found, "rank-2.tensors") is None
    # Proof that memory is read: the disk's copy damaged, the load still has the step.
    _flip_last_byte(found.path / STATE_TENSORS)
    assert torch.equal(store.load(5, series="main")["w"], torch.full((4,), 5.0))
    assert store.load_rank_state(5, series="main", rank=1)["step"] == 5
    monkeypatch.delenv(memtier.DIR_ENV)  # not a restarted worker: the disk, damaged
    with pytest.raises(Exception, match="checksum"):
        store.load(5, series="main")


def test_a_tier_copy_that_is_not_the_checkpoints_bytes_loads_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    import torch

    folder, _ = _restarted(tmp_path, monkeypatch, ws)
    _flip_last_byte(folder / "restore" / "rank-0" / STATE_TENSORS)
    assert torch.equal(ws.checkpoints.load(5, series="main")["w"], torch.full((4,), 5.0))


def test_another_step_or_series_is_never_taken_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    _restarted(tmp_path, monkeypatch, ws)
    (five,) = ws.checkpoints.view("main").checkpoints
    assert tier_copy(five, STATE_TENSORS) is not None
    for change in ({"step": 7}, {"series": "other"}):  # a checkpoint saved since, another
        found = replace(five, manifest=replace(five.manifest, **change))
        assert tier_copy(found, STATE_TENSORS) is None, change
    ws.checkpoints.save({"w": 1}, step=7)  # the default series, saved after the failure
    (seven,) = ws.checkpoints.view().checkpoints
    assert tier_copy(seven, STATE_TENSORS) is None
    assert ws.checkpoints.load(7) == {"w": 1}


def test_restore_goes_once_the_new_attempt_holds_a_step_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder, persister = _restarted(tmp_path, monkeypatch, ws)
    write(folder, 0, 6)
    assert not persister.drop_restored()  # rank 1 has not snapshotted yet
    write(folder, 1, 6)
    assert persister.drop_restored()
    assert not (folder / memtier.RESTORE).exists()


def test_the_restarted_main_rank_releases_the_memory_once_every_rank_has_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    import torch

    folder, _ = _restarted(tmp_path, monkeypatch, ws)
    state = ws.checkpoints.load(5, series="main")
    release()
    assert not (folder / memtier.RESTORE).exists()
    assert torch.equal(state["w"], torch.full((4,), 5.0))  # mapped, still there
    release()  # once is enough; again is nothing


def test_a_failure_before_any_commit_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder = tier(tmp_path, monkeypatch)
    write(folder, 0, 5)  # never whole
    persister = Persister(folder, ws.checkpoints.commit_files, 2, None, run_id="run-1")
    assert persister.persist_newest() is None
    assert not persister.clear(keep=persister.newest)
    assert sorted(p.name for p in folder.iterdir()) == ["owner"]


# -- the commit beside the restart ----------------------------------------------------------


def _failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Step 5 whole on both ranks, step 6 on rank 0 only: the tier a failure leaves."""
    folder = tier(tmp_path, monkeypatch)
    for rank, step in ((0, 5), (1, 5), (0, 6)):
        write(folder, rank, step)
    return folder


def test_the_failures_step_is_kept_for_the_restart_and_committed_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder = _failed(tmp_path, monkeypatch)
    go, said = threading.Event(), []

    def slow_commit(*args: Any) -> Any:
        assert go.wait(30)  # the restart goes on meanwhile
        return ws.checkpoints.commit_files(*args)

    persister = Persister(folder, slow_commit, 2, None, run_id="run-1")
    assert persister.commit_behind(lambda step, from_memory: said.append((step, from_memory)))
    # Returned at once: the step's slots are in restore/, the rest of the attempt gone,
    # and the workers of the restart would wait for the commit (its lock is held).
    assert sorted(p.name for p in (folder / memtier.RESTORE).iterdir()) == ["rank-0", "rank-1"]
    assert not (folder / "rank-0").exists() and not (folder / "rank-1").exists()
    marker = os.open(folder / COMMITTING, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(marker, fcntl.LOCK_SH | fcntl.LOCK_NB)
    finally:
        os.close(marker)
    monkeypatch.setenv(memtier.DIR_ENV, str(folder))
    assert ws.checkpoints.list("main") == []  # the launcher itself never waits for itself
    assert not persister.drop_restored()  # not while it is being committed
    go.set()
    persister.stop()  # joins the commit
    assert said == [(5, True)]
    assert sorted(p.name for p in folder.iterdir()) == ["owner", "persisted", "restore"]
    (five,) = ws.checkpoints.view("main").checkpoints
    assert five.manifest.step == 5 and five.manifest.tag == "failure"
    assert tier_copy(five, STATE_TENSORS) == folder / "restore" / "rank-0" / STATE_TENSORS
    assert persister.newest == 5


def test_a_step_that_cannot_be_kept_is_committed_before_the_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder = _failed(tmp_path, monkeypatch)
    rename, calls = os.rename, []

    def second_fails(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(errno.EXDEV, "refused")
        rename(src, dst)

    monkeypatch.setattr(os, "rename", second_fails)
    said: list[tuple[int, bool]] = []
    persister = Persister(folder, ws.checkpoints.commit_files, 2, None, run_id="run-1")
    assert not persister.commit_behind(lambda step, memory: said.append((step, memory)))
    monkeypatch.setattr(os, "rename", rename)
    # The slot moved first went back where the commit found it: step 5 is on disk.
    assert said == [(5, False)]
    assert [f.manifest.step for f in ws.checkpoints.view("main").checkpoints] == [5]
    assert sorted(p.name for p in folder.iterdir()) == ["owner", "persisted"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restarted_worker_finds_the_checkpoint_being_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder = _failed(tmp_path, monkeypatch)
    go = threading.Event()

    def slow_commit(*args: Any) -> Any:
        assert go.wait(60)
        return ws.checkpoints.commit_files(*args)

    persister = Persister(folder, slow_commit, 2, None, run_id="run-1")
    assert persister.commit_behind(lambda step, from_memory: None)
    # A worker of the restart (another process, the tier in its environment) looks for
    # the newest checkpoint while the launcher is still committing the failure's.
    look = "from accel.workspace import Workspace; print(Workspace('.accelerate').checkpoints.latest('main').step)"
    worker = subprocess.Popen(
        [sys.executable, "-c", look],
        env={**os.environ, memtier.DIR_ENV: str(folder)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        while not _waits_on_a_lock(worker.pid):  # an event: the kernel lists the waiter
            assert worker.poll() is None, "the worker looked before the commit was done"
            time.sleep(0.01)
        go.set()
        out, _ = worker.communicate(timeout=60)
    finally:
        go.set()
        worker.kill()
        persister.stop()
    assert worker.returncode == 0 and out.strip() == "5"


def _waits_on_a_lock(pid: int) -> bool:
    """Whether ``pid`` is blocked on a file lock (``/proc/locks`` marks a waiter ``->``)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "->" and fields[5].split(":")[0] == str(pid):
            return True
    return False


# -- the copy around the page cache ---------------------------------------------------------


@pytest.mark.parametrize(
    "size",
    [
        0,
        1,
        _fs.DIRECT_ALIGN - 1,
        _fs.DIRECT_ALIGN + 1,
        _fs.DIRECT_CHUNK,
        2 * _fs.DIRECT_CHUNK + 4097,
    ],
)
def test_a_copy_holds_the_bytes_and_hashes_them_all(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "source").write_bytes(data)
    seen = bytearray()
    with open(tmp_path / "source", "rb") as source:
        copied = _fs.copy_direct(source, tmp_path / "target", seen.extend)
    assert copied == size and bytes(seen) == data
    assert (tmp_path / "target").read_bytes() == data


def test_a_file_system_that_refuses_direct_writes_gets_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = []
    write = os.write

    def refusing(fd: int, data: object) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return write(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(_fs.os, "write", refusing)
    data = os.urandom(_fs.DIRECT_CHUNK + 12345)
    (tmp_path / "source").write_bytes(data)
    with open(tmp_path / "source", "rb") as source:
        assert _fs.copy_direct(source, tmp_path / "target", lambda _: None) == len(data)
    assert refused and (tmp_path / "target").read_bytes() == data


def test_a_copy_never_replaces_a_file(tmp_path: Path) -> None:
    (tmp_path / "source").write_bytes(b"new")
    (tmp_path / "target").write_bytes(b"old")
    with open(tmp_path / "source", "rb") as source, pytest.raises(FileExistsError):
        _fs.copy_direct(source, tmp_path / "target", lambda _: None)
    assert (tmp_path / "target").read_bytes() == b"old"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_tier_that_fills_after_the_commit_commits_the_step_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    # /dev/shm filled by something else: the note written after the commit failed with
    # ENOSPC, the persist was reported as failed ("the disk is full"), and the launcher
    # committed the older steps one by one, past keep_last
    with tiny_tmpfs(tmp_path / "shm") as small_tmpfs:
        monkeypatch.setenv(memtier.BASE_ENV, str(small_tmpfs))
        folder = memtier.make_tier("run-1")
        for step in (4, 5):
            write(folder, 0, step)
            write(folder, 1, step)
        with open(small_tmpfs / "filler", "wb") as filler, contextlib.suppress(OSError):
            while True:  # fill what is left
                filler.write(b"\0" * 65536)
                filler.flush()
        persister = Persister(folder, ws.checkpoints.commit_files, 2, None, run_id="run-1")
        assert persister.persist_newest() == 5
        assert persister.persist_newest() is None  # nothing older in its place
        assert [c.manifest.step for c in ws.checkpoints.view("main").checkpoints] == [5]
