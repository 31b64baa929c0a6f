"""Checkpoints: commit protocol, verification, retention, async, lease, crashes."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.clean import held_series
from accel.errors import IntegrityError, UsageError, WorkspaceError
from accel.layout import OWNER_MARKER, make_owned_dir
from accel.store import async_save
from accel.store._trace import recording
from accel.store.checkpoints import MANIFEST, Checkpoints
from accel.store.hashing import hash_file
from accel.store.lease import LeaseHeld, SeriesLease, holder_of

from . import workers

Ctx = multiprocessing.context.BaseContext


def _state(value: float, n: int = 16) -> dict[str, Any]:
    return {"model": {"w": torch.full((n,), value)}, "step": int(value), "note": "x"}


def test_save_list_latest_load(ws: Workspace) -> None:
    ckpts = ws.checkpoints
    assert ckpts.latest() is None and ckpts.list() == []
    with pytest.raises(UsageError, match="no committed checkpoint"):
        ckpts.load()
    for step in (10, 2, 7):
        info = ckpts.save(_state(step), step, tag=f"t{step}")
        assert info is not None and info.step == step and info.size > 0
    assert [i.step for i in ckpts.list()] == [2, 7, 10]
    latest = ckpts.latest()
    assert latest is not None and latest.step == 10 and latest.tag == "t10"
    assert torch.equal(ckpts.load()["model"]["w"], torch.full((16,), 10.0))
    assert ckpts.load(7)["step"] == 7
    assert latest.path == ws.checkpoints_dir / "default" / "step-000000000010"


def test_manifest_format(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_RUN_ID", "r1")
    info = ws.checkpoints.save(_state(1), 1, tag="best")
    assert info is not None
    manifest = json.loads((info.path / MANIFEST).read_text())
    assert manifest["format"] == 1 and manifest["series"] == "default"
    assert manifest["step"] == 1 and manifest["tag"] == "best" and manifest["run_id"] == "r1"
    assert isinstance(manifest["created"], float)
    checksum, size = hash_file(info.path / "state.tensors")
    assert manifest["files"] == {"state.tensors": {"size": size, "checksum": checksum}}
    assert sorted(p.name for p in info.path.iterdir()) == [OWNER_MARKER, MANIFEST, "state.tensors"]


def test_series_from_run_name(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_RUN_NAME", "exp-1")
    ckpts = Workspace.discover().checkpoints
    ckpts.save(_state(1), 1)
    assert ckpts.series() == ["exp-1"] and ckpts.latest() is not None
    assert Checkpoints(ws.layout, ws.settings.checkpoints, series="default").latest() is None
    assert [i.series for i in ckpts.all()] == ["exp-1"]
    with pytest.raises(UsageError, match="run name"):
        Checkpoints(ws.layout, ws.settings.checkpoints, series="../x")


@pytest.mark.parametrize("step", [-1, 1.5, "3", True, 10**12])
def test_bad_steps_are_refused(ws: Workspace, step: Any) -> None:
    with pytest.raises(UsageError, match="checkpoint step"):
        ws.checkpoints.save(_state(1), step)


def test_unsafe_state_is_refused_before_writing(ws: Workspace) -> None:
    with pytest.raises(UsageError, match=r"state\['model'\]"):
        ws.checkpoints.save({"model": object()}, 1)
    assert ws.checkpoints.debris() == [] and ws.checkpoints.list() == []


def test_torn_checkpoints_are_invisible_and_listed_as_debris(ws: Workspace) -> None:
    ws.checkpoints.save(_state(1), 1)
    good = ws.checkpoints.save(_state(2), 2)
    assert good is not None
    (good.path / MANIFEST).unlink()
    tmp = make_owned_dir(good.path.parent / ".tmp-000000000003-0123456789ab")
    strangers = [good.path.parent / ".tmp-000000000004-abc", good.path.parent / "step-5"]
    for folder in strangers:
        folder.mkdir()
        (folder / "theirs.bin").write_bytes(b"x")
    latest = ws.checkpoints.latest()
    assert latest is not None and latest.step == 1
    assert ws.checkpoints.debris() == [tmp, good.path]
    assert sorted(ws.checkpoints.view().unknown) == sorted(strangers)


def test_a_failed_save_removes_its_marker_last(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker killed while removing a failed save's folder must leave it marked, as
    # debris clean collects: unmarked, it was "not made by accel" and kept forever.
    from accel import _faults, _fs

    removed: list[str] = []
    real_unlink = _fs.os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        removed.append(os.path.basename(path))
        real_unlink(path, *args, **kwargs)

    def fail(name: str) -> None:
        if name == "commit.manifest-written":
            raise OSError(5, "injected")

    monkeypatch.setattr(_fs.os, "unlink", unlink)
    _faults.set_hook(fail)
    try:
        with pytest.raises(Exception, match="injected"):
            ws.checkpoints.save(_state(1), 1)
    finally:
        _faults.set_hook(None)
    assert len(removed) > 2 and removed[-1] == OWNER_MARKER, removed
    assert removed[-2] == MANIFEST and ws.checkpoints.list() == []


def test_a_flipped_byte_is_refused(ws: Workspace) -> None:
    info = ws.checkpoints.save(_state(1, n=4096), 1)
    assert info is not None
    data = bytearray((info.path / "state.tensors").read_bytes())
    data[len(data) // 2] ^= 0x10
    (info.path / "state.tensors").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="checksum"):
        ws.checkpoints.load()


def test_a_truncated_file_is_refused(ws: Workspace) -> None:
    info = ws.checkpoints.save(_state(1), 1)
    assert info is not None
    with open(info.path / "state.tensors", "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(IntegrityError, match="manifest says"):
        ws.checkpoints.load()


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_is_never_executed(ws: Workspace, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    info = ws.checkpoints.save(_state(1), 1)
    assert info is not None
    torch.save({"model": _Exploit(str(marker))}, info.path / "state.tensors")
    manifest = json.loads((info.path / MANIFEST).read_text())
    checksum, size = hash_file(info.path / "state.tensors")
    manifest["files"]["state.tensors"] = {"size": size, "checksum": checksum}
    (info.path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match="refused"):
        ws.checkpoints.load()
    assert not marker.exists()


def test_retention_keeps_exactly_keep_last_by_step(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "2")
    ckpts = Workspace.discover().checkpoints
    for step in range(1, 6):
        ckpts.save(_state(step), step)
        assert [i.step for i in ckpts.list()] == list(range(max(1, step - 1), step + 1))
    # Ordered by step, not by save order: an older step saved late is not kept over newer.
    ckpts.save(_state(3), 3)
    assert [i.step for i in ckpts.list()] == [3, 4, 5]  # the one just saved always stays
    ckpts.save(_state(9), 9)
    assert [i.step for i in ckpts.list()] == [5, 9]
    ckpts.wait()  # old data is removed in the background
    assert ckpts.debris() == []


def test_a_retention_delete_never_overlaps_the_next_save(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a big file keeps the disk busy (on ext4 with online discard the unlink
    waits for the discard): measured, a delete overlapping the next save's writes made
    that save slower and less steady than the two one after the other."""
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "1")
    ckpts = Workspace.discover().checkpoints
    state = {"w": torch.ones(1 << 20)}
    with recording() as spans:
        for step in (1, 2, 3):
            ckpts.save(state, step)
        ckpts.wait()
    removals = [s for s in spans if s.name == "reap-remove"]
    writes = [s for s in spans if s.name == "write"]
    assert len(removals) == 2 and writes
    for removal in removals:
        assert all(w.start >= removal.end for w in writes if w.end > removal.start)


def test_keep_all_when_keep_last_is_null(ws: Workspace) -> None:
    ws.config_file.write_text("checkpoints:\n  keep_last: null\n")
    ckpts = Workspace.discover().checkpoints
    for step in range(5):
        ckpts.save(_state(step), step)
    assert len(ckpts.list()) == 5


def test_saving_an_existing_step_replaces_it(ws: Workspace) -> None:
    ws.checkpoints.save(_state(1), 5)
    ws.checkpoints.save(_state(2), 5)
    assert ws.checkpoints.load(5)["step"] == 2
    ws.checkpoints.wait()  # the old copy is removed in the background
    assert len(ws.checkpoints.list()) == 1 and ws.checkpoints.debris() == []


@pytest.mark.parametrize("held", ["a folder of the user's", "a newer checkpoint", "extra files"])
def test_a_re_save_never_deletes_what_accel_may_not(ws: Workspace, held: str) -> None:
    # The old folder of the step went, whatever it held: the user's notes too.
    info = ws.checkpoints.save(_state(1), 30)
    assert info is not None
    step = info.path
    if held == "a folder of the user's":
        for child in list(step.iterdir()):
            child.unlink()
        step.rmdir()
        (step / "sub").mkdir(parents=True)
    elif held == "a newer checkpoint":
        manifest = json.loads((step / MANIFEST).read_text())
        (step / MANIFEST).write_text(json.dumps({**manifest, "format": 2}))
    (step / "sub").mkdir(exist_ok=True)
    (step / "sub" / "notes.txt").write_text("precious")
    with pytest.warns(RuntimeWarning, match=r"kept whole as step-000000000030\.kept-"):
        again = ws.checkpoints.save(_state(2), 30)
    assert again is not None and ws.checkpoints.load(30)["step"] == 2
    (kept,) = step.parent.glob("step-000000000030.kept-*")
    assert (kept / "sub" / "notes.txt").read_text() == "precious"
    assert kept in ws.checkpoints.view().unknown  # never cleaned, never loaded


def test_delete_removes_the_checkpoint(ws: Workspace) -> None:
    ws.checkpoints.save(_state(1), 1)
    ws.checkpoints.save(_state(2), 2)
    assert ws.checkpoints.delete(2) is True and ws.checkpoints.delete(2) is False
    assert [i.step for i in ws.checkpoints.list()] == [1]
    assert ws.checkpoints.debris() == []


def test_async_save(ws: Workspace) -> None:
    state = _state(1, n=1000)
    assert ws.checkpoints.save(state, 1, async_save=True) is None
    state["model"]["w"].fill_(99.0)  # the snapshot was taken before returning
    info = ws.checkpoints.wait()
    assert info is not None and info.step == 1
    assert torch.equal(ws.checkpoints.load(1)["model"]["w"], torch.full((1000,), 1.0))
    ws.checkpoints.save(_state(2), 2, async_save=True)
    latest = ws.checkpoints.load()  # joins the pending save first
    assert latest["step"] == 2


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "threads"])
def test_async_snapshot_of_large_tensors(ws: Workspace, threaded: bool) -> None:
    # Copied before save returns: below async_save._THREADED bytes in the caller's thread,
    # from there on as 8 MiB pieces on a few threads.
    numel = async_save._THREADED // 4 + (1_000_000 if threaded else -4_000_000)
    big = {"a": torch.arange(numel, dtype=torch.float32), "b": torch.ones(5, 7).t()}
    expected = {k: v.clone() for k, v in big.items()}
    for step in (1, 2):  # the second save reuses the snapshot buffers
        ws.checkpoints.save(big, step, async_save=True)
        big["a"].add_(1.0)  # the caller may change its tensors as soon as save returns
        ws.checkpoints.wait()
        loaded = ws.checkpoints.load(step)
        assert torch.equal(loaded["a"], expected["a"]) and torch.equal(loaded["b"], big["b"])
        expected["a"].add_(1.0)
    assert (ws.checkpoints._pool._threads is not None) == threaded


def test_async_saves_copy_and_write_on_two_threads_the_store_keeps(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thread started for each save cost its caller Thread.start() (up to milliseconds
    # on busy cores): the store's two threads start with its first save and run every
    # one after it, the copy at the caller's priority, the write niced.
    import threading

    from accel.store import async_save
    from accel.store.checkpoints import Checkpoints

    def where() -> tuple[int, int]:
        native = threading.get_native_id()
        return native, os.getpriority(os.PRIO_PROCESS, native)

    seen: dict[str, list[tuple[int, int]]] = {"copy": [], "write": []}
    real_copy, real_write = async_save.Snapshot.copy, Checkpoints._write

    def copy(self: async_save.Snapshot) -> None:
        seen["copy"].append(where())
        real_copy(self)

    def write(self: Checkpoints, *args: object, **kwargs: object) -> object:
        seen["write"].append(where())
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(async_save.Snapshot, "copy", copy)
    monkeypatch.setattr(Checkpoints, "_write", write)
    for step in (1, 2, 3):
        ws.checkpoints.save(_state(step), step, async_save=True)
        assert ws.checkpoints.wait().step == step  # type: ignore[union-attr]
    copier, writer = ({native for native, _ in seen[kind]} for kind in ("copy", "write"))
    assert len(copier) == 1 and len(writer) == 1 and copier != writer
    mine = where()[1]
    assert {nice for _, nice in seen["copy"]} == {mine}
    assert {nice for _, nice in seen["write"]} == {max(mine, 10)}


def test_async_save_from_config(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_ASYNC_SAVE", "true")
    ckpts = Workspace.discover().checkpoints
    assert ckpts.save(_state(1), 1) is None
    info = ckpts.wait()
    assert info is not None and info.step == 1


# -- the series lease --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_a_second_live_run_fails_fast_naming_the_holder(ws: Workspace, fork: Ctx) -> None:
    child = workers.process(fork, workers.save_in_child, str(ws.path), 1, {})
    child.start()
    assert workers.finish(child) == 0  # a plain process leased the series and died: free
    ws.checkpoints.save(_state(2), 2)  # this process takes it over at once
    holder = holder_of(ws.layout, "default")
    assert holder is not None and holder.pid == os.getpid()

    rival = workers.process(fork, workers.save_in_child, str(ws.path), 3, {})
    started = time.monotonic()
    rival.start()
    assert workers.finish(rival) not in (0, None) and time.monotonic() - started < 20
    with pytest.raises(LeaseHeld, match=rf"pid {os.getpid()} on {socket.gethostname()}"):
        SeriesLease(ws.layout, "default").acquire()  # a fresh lease object conflicts as well
    assert [i.step for i in ws.checkpoints.list()] == [1, 2]


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_workers_of_the_holding_run_save_without_acquiring(
    ws: Workspace, fork: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready = fork.Event()
    launcher = workers.process(fork, workers.hold_lease, str(ws.path), "run-A", ready)
    launcher.start()
    try:
        assert ready.wait(10)
        monkeypatch.setenv("ACCEL_RUN_ID", "run-B")
        with pytest.raises(LeaseHeld, match=rf"pid {launcher.pid} .*run-A"):
            Workspace.discover().checkpoints.save(_state(1), 1)
        monkeypatch.setenv("ACCEL_RUN_ID", "run-A")
        Workspace.discover().checkpoints.save(_state(2), 2)
        holder = holder_of(ws.layout, "default")
        assert holder is not None and holder.pid == launcher.pid
        assert Workspace.discover().checkpoints.load()["step"] == 2  # reading needs no lease
    finally:
        launcher.kill()
        launcher.join()
    monkeypatch.setenv("ACCEL_RUN_ID", "run-B")
    Workspace.discover().checkpoints.save(_state(3), 3)  # the dead holder's lease is taken
    holder = holder_of(ws.layout, "default")
    assert holder is not None and holder.pid == os.getpid() and holder.run_id == "run-B"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_live_run_keeps_its_series_across_a_worker_restart(
    ws: Workspace, fork: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel import runs

    run_a = "20261201-000000-aaaaaa"
    with runs.run_lock(ws.layout, run_a):  # run A's launcher: live, holding no lease
        # Its rank 0 took the series at its first save and died (a restart is coming):
        # the kernel dropped the flock, the series is still run A's.
        child = workers.process(
            fork, workers.save_in_child, str(ws.path), 1, {"ACCEL_RUN_ID": run_a}
        )
        child.start()
        assert workers.finish(child) == 0
        holder = holder_of(ws.layout, "default")
        assert holder is not None and holder.run_id == run_a
        assert held_series(ws.locks_dir) == {"default"}  # accel clean keeps it too
        monkeypatch.setenv("ACCEL_RUN_ID", "20261201-000000-bbbbbb")
        with pytest.raises(LeaseHeld, match=rf"held by pid {child.pid} .*run {run_a}"):
            Workspace.discover().checkpoints.save(_state(2), 2)
        # The restarted rank 0 of run A saves on.
        child = workers.process(
            fork, workers.save_in_child, str(ws.path), 3, {"ACCEL_RUN_ID": run_a}
        )
        child.start()
        assert workers.finish(child) == 0
    assert holder_of(ws.layout, "default") is None  # run A ended: the series is free
    assert held_series(ws.locks_dir) == frozenset()
    Workspace.discover().checkpoints.save(_state(4), 4)
    assert [i.step for i in ws.checkpoints.list()] == [1, 3, 4]


# -- crashes and write errors ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_at_random_instants_never_tears_or_loses_the_latest(
    ws: Workspace, fork: Ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "2")  # deletion is killed too
    ckpts = Workspace.discover().checkpoints
    rng = random.Random(20261129)
    next_step = 0
    for _ in range(40):
        before = ckpts.latest()
        child = workers.process(fork, workers.save_forever, str(ws.path), next_step)
        child.start()
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join()
        infos = ckpts.list()
        latest = ckpts.latest()
        if before is not None:
            assert latest is not None and latest.step >= before.step
        for info in infos:
            loaded = ckpts.load(info.step)
            assert loaded["step"] == info.step and loaded["model"]["a"][0] == info.step
        next_step = (latest.step + 1) if latest else 0
    assert next_step > 0


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_save_over_the_file_size_limit_fails_cleanly(ws: Workspace, fork: Ctx) -> None:
    queue = fork.Queue()
    child = workers.process(fork, workers.save_under_fsize_limit, str(ws.path), 64_000, queue)
    child.start()
    try:
        outcome = queue.get(timeout=50)
    finally:
        exitcode = workers.finish(child)
    assert exitcode == 0  # the process was not killed (SIGXFSZ) and went on
    assert len(outcome) == 2
    for line in outcome:
        assert line.startswith("WriteFailed") and "state.tensors" in line
        assert "a file-size limit was hit (see `ulimit -f`): raise it" in line  # EFBIG
    assert [i.step for i in ws.checkpoints.list()] == [1]
    assert torch.equal(ws.checkpoints.load()["w"], torch.zeros(1000))
    assert ws.checkpoints.debris() == []


def test_retention_and_delete_never_follow_a_linked_step_folder(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "1")
    ckpts = Workspace.discover().checkpoints
    first = ckpts.save(_state(1), 1)
    assert first is not None
    outside = tmp_path / "outside"
    outside.mkdir()
    for path in first.path.iterdir():  # a valid copy of step 1, outside the workspace
        (outside / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((outside / MANIFEST).read_text())
    manifest["step"] = 3
    (outside / MANIFEST).write_text(json.dumps(manifest))
    before = sorted((p.name, p.read_bytes()) for p in outside.iterdir())
    link = ckpts.series_dir() / "step-000000000003"
    link.symlink_to(outside)
    assert [i.step for i in ckpts.list()] == [1]  # a link is no checkpoint
    assert ckpts.delete(3) is False
    ckpts.save(_state(5), 5)  # retention (keep 1) must not reach through the link
    ckpts.wait()
    assert [i.step for i in ckpts.list()] == [5] and link.is_symlink()
    assert sorted((p.name, p.read_bytes()) for p in outside.iterdir()) == before
    assert link in ckpts.view().unknown


def test_checkpoints_are_never_read_through_a_linked_series_folder(
    ws: Workspace, tmp_path: Path
) -> None:
    """A series folder that links to another workspace's checkpoints: saves refused it,
    and `accel checkpoints list` called it not accel's, never loaded, but list(), get()
    and load() read through it. (A linked ``checkpoints/``, data on another disk, is
    read: tests/clean/test_linked_folders.py.)"""
    other = Workspace(tmp_path / "other" / ".accelerate")
    assert other.checkpoints.save(_state(7), 7) is not None
    ckpts = ws.checkpoints
    ckpts.root.mkdir(parents=True, exist_ok=True)
    linked = ckpts.series_dir()
    linked.symlink_to(other.checkpoints.series_dir())
    assert ckpts.list() == [] and ckpts.all() == [] and ckpts.get(7) is None
    assert ckpts.series() == [] and ckpts.view().unknown == (linked,)
    for step in (None, 7):
        with pytest.raises(WorkspaceError, match=f"{linked} is a symbolic link; accel does not"):
            ckpts.load(step)


def test_the_names_checkpoints_exports_are_their_homes_own() -> None:
    """The regrouping of store (issue 26) moved the name checks to series and the tensor
    file to tensorfile: accel.store.checkpoints still gives every name it exported."""
    from accel.store import checkpoints, manifest, series

    assert all(hasattr(checkpoints, name) for name in checkpoints.__all__)
    assert checkpoints.check_series is series.check_series
    assert checkpoints.check_step is series.check_step
    assert checkpoints.series_from_env is series.series_from_env
    assert checkpoints.read_manifest is manifest.read_manifest
    assert checkpoints.STATE_TENSORS == "state.tensors"


def test_a_listing_read_across_a_save_and_its_retention_still_shows_the_new_step(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # keep_last 1 in a live run: step 2 is committed and step 1 retired between the
    # reader's directory listing (step 1 only) and its read of step 1's manifest.
    from accel.store import series

    ws.checkpoints.save({"w": torch.zeros(2)}, 1, async_save=False)
    real_read = series.read_manifest
    raced: list[Path] = []

    def read_across_a_save(path: Path) -> object:
        if not raced and path.name.endswith("1"):
            raced.append(path)
            ws.checkpoints.save({"w": torch.ones(2)}, 2, async_save=False)
            ws.checkpoints.delete(1)
        return real_read(path)

    monkeypatch.setattr(series, "read_manifest", read_across_a_save)
    assert [info.step for info in ws.checkpoints.list()] == [2]
    assert raced
