"""The memory tier's files, read as the launcher reads them: whole steps only, a hostile
``meta.json`` refused, a slot rewritten under a copy never committed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from accel.errors import UsageError
from accel.store import memtier
from accel.store.persister import Persister
from accel.workspace import Workspace


def tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(memtier.BASE_ENV, str(tmp_path / "shm"))
    (tmp_path / "shm").mkdir()
    return memtier.make_tier("run-1")


def write(folder: Path, rank: int, step: int, *, keep: bool = False) -> memtier.SlotWriter:
    import torch

    writer = memtier.SlotWriter(folder, rank)
    trees = {
        name: {"step": step, "w": torch.full((4,), float(step))} for name in memtier.files_of(rank)
    }
    writer.write(step, "main", trees, keep=0.0 if keep else None)
    return writer


def test_only_steps_every_rank_holds_whole_are_common(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tier(tmp_path, monkeypatch)
    w0 = write(folder, 0, 1)
    write(folder, 1, 1)
    assert list(memtier.common_steps(folder, 2)) == [1]
    w0.write(2, "main", {n: {"s": 2} for n in memtier.files_of(0)})
    assert list(memtier.common_steps(folder, 2)) == [1]  # rank 1 has no step 2 yet
    w0.write(3, "main", {n: {"s": 3} for n in memtier.files_of(0)})
    assert list(memtier.common_steps(folder, 2)) == [1]  # three slots: 1 is still there
    w0.write(4, "main", {n: {"s": 4} for n in memtier.files_of(0)})
    assert list(memtier.common_steps(folder, 2)) == []  # rank 0 rewrote step 1's slot
    assert sorted(s.step for s in memtier.slots(folder, 2)[0]) == [2, 3, 4]


def test_a_rank_never_overwrites_the_newest_step_every_rank_holds_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    folder = tier(tmp_path, monkeypatch)
    r0, r1 = memtier.SlotWriter(folder, 0, 2), memtier.SlotWriter(folder, 1, 2)

    def snap(writer: memtier.SlotWriter, step: int, wait: float = 0.0) -> None:
        writer.write(
            step, "main", {n: {"s": step} for n in memtier.files_of(writer.rank)}, wait=wait
        )

    snap(r1, 1)
    for step in (1, 2, 3):  # rank 0 runs ahead: its writer is faster, or rank 1 died
        snap(r0, step)
    assert list(memtier.common_steps(folder, 2)) == [1]
    later = threading.Timer(0.2, snap, (r1, 2))
    later.start()
    snap(r0, 4, wait=30)  # every slot holds 1 (common) or newer: it waits for rank 1
    # It returned once rank 1's step 2 was there to see (its meta.json, the last file
    # rank 1 writes), not at an event rank 1 sets after its write returns: rank 0 may
    # see the step, write its own and return before that.
    assert 2 in [s.step for s in memtier.slots(folder, 2)[1]]
    later.join()
    assert list(memtier.common_steps(folder, 2)) == [2]
    assert sorted(s.step for s in memtier.slots(folder, 2)[0]) == [2, 3, 4]


@pytest.mark.parametrize(
    "meta",
    [
        {"step": 1, "series": "main", "rank": 1, "files": {}},  # another rank's
        {"step": -1, "series": "main", "rank": 0, "files": {}},
        {"step": True, "series": "main", "rank": 0, "files": {}},
        {"step": 1, "series": "../x", "rank": 0, "files": {}},
        {"step": 1, "series": "main", "rank": 0, "files": {"../../etc/passwd": {}}},
        {"step": 1, "series": "main", "rank": 0, "files": {}, "extra": 1},
        [],
    ],
)
def test_a_hostile_meta_is_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meta: object
) -> None:
    folder = tier(tmp_path, monkeypatch)
    write(folder, 0, 1)
    slot = folder / "rank-0" / memtier.SLOTS[0]
    (slot / memtier.META).write_text(json.dumps(meta))
    assert memtier.read_slot(slot, 0) is None
    assert memtier.common_steps(folder, 1) == {}


def test_the_persister_commits_a_checkpoint_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    import torch

    folder = tier(tmp_path, monkeypatch)
    write(folder, 0, 5, keep=True)
    write(folder, 1, 5, keep=True)
    store = ws.checkpoints
    persister = Persister(folder, store.commit_files, 2, 5, run_id="run-1")
    assert persister.persist_due() == 5
    assert persister.persist_due() is None  # once
    assert memtier.persisted_step(folder) == 5
    info = store.get(5, series="main")
    assert info is not None
    assert torch.equal(store.load(5, series="main")["w"], torch.full((4,), 5.0))
    assert store.load_rank_state(5, series="main", rank=1)["step"] == 5


def test_a_slot_rewritten_while_it_is_opened_is_not_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder = tier(tmp_path, monkeypatch)
    writer = write(folder, 0, 3)
    store = ws.checkpoints
    rewrites = []

    def commit(*args: object) -> None:
        raise AssertionError("committed a rewritten slot")

    persister = Persister(folder, commit, 1, None)
    real_open = open

    def open_then_rewrite(path: object, *args: object, **kwargs: object) -> object:
        handle = real_open(path, *args, **kwargs)  # type: ignore[call-overload]
        if not rewrites:  # the worker rewrites the slot right after the launcher opened it
            rewrites.append(path)
            for step in (4, 5, 6):
                writer.write(step, "main", {n: {"s": step} for n in memtier.files_of(0)})
        return handle

    monkeypatch.setattr("builtins.open", open_then_rewrite)
    assert persister.persist_newest() is None  # every step it found was rewritten
    monkeypatch.undo()
    assert rewrites and store.list(series="main") == []


def test_a_recorded_size_that_is_not_the_files_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    folder = tier(tmp_path, monkeypatch)
    write(folder, 0, 3)
    meta_path = folder / "rank-0" / memtier.SLOTS[0] / memtier.META
    meta = json.loads(meta_path.read_text())
    meta["files"]["state.tensors"]["size"] += 1
    meta_path.write_text(json.dumps(meta))
    store = ws.checkpoints
    persister = Persister(folder, store.commit_files, 1, None)
    assert persister.persist_newest() is None
    assert store.list(series="main") == []
    assert not [p for p in store.series_dir("main").iterdir() if p.name.startswith(".tmp")]


def test_a_dead_launchers_tier_is_swept_a_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = tier(tmp_path, monkeypatch)
    dead = tmp_path / "shm" / "accel-run-0"
    dead.mkdir()
    (dead / memtier.OWNER).write_text("999999999")
    other = tmp_path / "shm" / "not-ours"
    other.mkdir()
    assert memtier.sweep_dead(tmp_path / "shm") == [dead]
    assert live.is_dir() and other.is_dir() and not dead.exists()
    assert (live / memtier.OWNER).read_text() == str(os.getpid())


def test_a_shm_dir_the_tier_cannot_go_in_is_one_line_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("")
    advice = (
        "set ACCEL_SHM_DIR to a tmpfs folder you can write, or unset checkpoints.snapshot_every"
    )
    for base in (tmp_path / "missing", tmp_path / "a-file"):
        monkeypatch.setenv(memtier.BASE_ENV, str(base))
        with pytest.raises(UsageError) as caught:
            memtier.make_tier("run-1")
        assert str(caught.value) == (
            f"checkpoints.snapshot_every keeps snapshots in ACCEL_SHM_DIR={base}, which is "
            f"not a folder this user can write: {advice}"
        )
    assert not (tmp_path / "missing").exists()
    # relative: the workers, whatever folder they run in, find it by its absolute path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shm").mkdir()
    monkeypatch.setenv(memtier.BASE_ENV, "shm")
    assert memtier.make_tier("run-2") == tmp_path / "shm" / "accel-run-2"
    monkeypatch.delenv(memtier.BASE_ENV)
    assert memtier.base_dir() == Path("/dev/shm")


def test_persist_every_must_be_a_multiple_of_snapshot_every() -> None:
    class Settings:
        snapshot_every, persist_every = 4, 6

    with pytest.raises(UsageError, match="must be a multiple"):
        memtier.snapshot_settings(Settings())
    Settings.snapshot_every = None
    with pytest.raises(UsageError, match="needs checkpoints.snapshot_every"):
        memtier.snapshot_settings(Settings())


def test_a_step_to_persist_never_replaces_a_ranks_only_copy_of_the_common_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # persist_every == snapshot_every: every step is due. Rank 1 lags at step 1; rank 0
    # goes on to 3 (the launcher keeps up: no wait). Step 1 must stay whole on both.
    folder = tier(tmp_path, monkeypatch)
    write(folder, 1, 1, keep=True)
    w0 = write(folder, 0, 1, keep=True)
    for step in (2, 3):
        w0.write(step, "main", {n: {"s": step} for n in memtier.files_of(0)}, keep=0.0)
    assert list(memtier.common_steps(folder, 2)) == [1]
    kept = memtier.read_slot(folder / "rank-0" / memtier.KEEP, 0)
    assert kept is not None and kept.step == 3  # the launcher's next step to commit


def test_a_step_linked_into_slot_keep_while_it_is_opened_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    # Rank 1 wrote step 6 to a rotating slot and links it into slot-keep just after the
    # launcher opened it: the same files under another name, still the snapshot whole.
    folder = tier(tmp_path, monkeypatch)
    trees = {r: {n: {"s": 6, "rank": r} for n in memtier.files_of(r)} for r in (0, 1)}
    memtier.SlotWriter(folder, 0, 2).write(6, "main", trees[0], keep=0.0)
    w1 = memtier.SlotWriter(folder, 1, 2)
    w1.write(6, "main", trees[1])
    (slot,) = memtier.slots(folder, 2)[1]
    linked = []
    real_open = open

    def open_then_link(path: object, *args: object, **kwargs: object) -> object:
        handle = real_open(path, *args, **kwargs)  # type: ignore[call-overload]
        if not linked:
            linked.append(path)
            meta = {"step": 6, "series": "main", "rank": 1, "files": slot.files}
            w1._link(slot.path, folder / "rank-1" / memtier.KEEP, meta)
        return handle

    persister = Persister(folder, ws.checkpoints.commit_files, 2, None)
    monkeypatch.setattr("builtins.open", open_then_link)
    assert persister.persist_newest() == 6
    monkeypatch.undo()
    assert linked and ws.checkpoints.load_rank_state(6, series="main", rank=1)["rank"] == 1


def test_every_due_step_is_committed_in_order_none_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    # A fast loop: step 10 is whole in the rotating slots (its link into slot-keep waits
    # for 5's commit) before the launcher's thread polls once.
    folder = tier(tmp_path, monkeypatch)
    writers = [memtier.SlotWriter(folder, r, 2) for r in (0, 1)]
    for step, keep in ((5, 0.0), (10, None)):
        for w in writers:
            w.write(step, "main", {n: {"s": step} for n in memtier.files_of(w.rank)}, keep=keep)
    persister = Persister(folder, ws.checkpoints.commit_files, 2, 5)
    assert [persister.persist_due(), persister.persist_due(), persister.persist_due()] == [
        5,
        10,
        None,
    ]
    assert [i.step for i in ws.checkpoints.list(series="main")] == [5, 10]


# -- a slot's files rewritten in place ---------------------------------------------------


def tensors(step: int, n: int = 1000) -> dict[str, object]:
    import torch

    return {"step": step, "w": torch.arange(n, dtype=torch.float32) * step, "b": [step] * 3}


def snap(writer: memtier.SlotWriter, step: int, n: int = 1000, **kw: object) -> None:
    writer.write(step, "main", {name: tensors(step, n) for name in memtier.files_of(0)}, **kw)  # type: ignore[arg-type]


def as_written(tmp_path: Path, tree: object) -> bytes:
    """The bytes of ``tree``'s file as a checkpoint holds it (a new file, hashed)."""
    from accel.store.tensorfile import save_tensor_file

    path = tmp_path / f"new-{len(list(tmp_path.glob('new-*')))}"
    save_tensor_file(tree, path)
    return path.read_bytes()


def test_a_slot_is_rewritten_in_place_with_the_bytes_a_new_file_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tier(tmp_path, monkeypatch)
    writer = memtier.SlotWriter(folder, 0)
    state = folder / "rank-0" / memtier.SLOTS[0] / "state.tensors"
    snap(writer, 1)
    # Open, unlocked (no reader of accel's): a file replaced would stay what it was here.
    seen = os.open(state, os.O_RDONLY)
    try:
        # steps 4, 7 and 10 land in slot 0: the same size, then larger, then smaller
        for step in range(2, 11):
            n = {7: 5000, 10: 300}.get(step, 1000)
            snap(writer, step, n)
            if step % 3 == 1:
                expected = as_written(tmp_path, tensors(step, n))
                assert state.read_bytes() == expected, step
                assert os.fstat(seen).st_ino == state.stat().st_ino  # the same file
                assert os.pread(seen, len(expected) + 1, 0) == expected, step
                slot = memtier.read_slot(state.parent, 0)
                assert slot is not None and slot.step == step
                assert slot.files["state.tensors"]["size"] == len(expected)
    finally:
        os.close(seen)


def test_a_file_the_launcher_holds_is_never_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    folder = tier(tmp_path, monkeypatch)
    writer = memtier.SlotWriter(folder, 0)
    snap(writer, 1)
    state = folder / "rank-0" / memtier.SLOTS[0] / "state.tensors"
    with open(state, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # as the persister does
        for step in (2, 3, 4):  # 4 goes to slot 0
            snap(writer, step)
        assert held.read() == as_written(tmp_path, tensors(1))
        assert os.fstat(held.fileno()).st_ino != state.stat().st_ino
    assert state.read_bytes() == as_written(tmp_path, tensors(4))
    for step in (5, 6, 7):  # released: slot 0's new file is rewritten in place
        inode = state.stat().st_ino
        snap(writer, step)
    assert state.stat().st_ino == inode


def test_a_file_linked_into_slot_keep_is_never_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tier(tmp_path, monkeypatch)
    writer = memtier.SlotWriter(folder, 0)
    snap(writer, 1, keep=0.0)  # linked into slot-keep for the launcher to commit
    for step in (2, 3, 4):
        snap(writer, step)
    kept = memtier.read_slot(folder / "rank-0" / memtier.KEEP, 0)
    assert kept is not None and kept.step == 1
    assert (kept.path / "state.tensors").read_bytes() == as_written(tmp_path, tensors(1))


def test_a_slot_rewritten_while_the_launcher_copies_it_commits_what_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ws: Workspace
) -> None:
    import torch

    # The worker goes on while the launcher copies step 1 to disk: its rewrite of slot 0
    # (step 4) must not land in the file the launcher is reading.
    folder = tier(tmp_path, monkeypatch)
    writer = memtier.SlotWriter(folder, 0)
    snap(writer, 1)
    store = ws.checkpoints

    def commit(*args: object) -> object:
        for step in (2, 3, 4):
            snap(writer, step)
        return store.commit_files(*args)  # type: ignore[arg-type]

    persister = Persister(folder, commit, 1, None)
    assert persister.persist_newest() == 1
    saved = store.load(1, series="main")
    assert saved["step"] == 1 and torch.equal(saved["w"], tensors(1)["w"])  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_process_forked_from_the_worker_lets_go_of_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DataLoader's workers are forked from the training process: were the tier's files
    # still open or mapped there, a file the worker replaces would stay in shared memory
    # until they end.
    folder = tier(tmp_path, monkeypatch)
    writer = memtier.SlotWriter(folder, 0)
    for step in (1, 2, 3, 4):  # slot 0's files written, then rewritten through a mapping
        snap(writer, step)
    assert str(folder) in Path("/proc/self/maps").read_text()
    mapped = next(iter(writer._files._files.values()))
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it still holds, and leave at once
        try:
            maps = Path("/proc/self/maps").read_text()
            try:
                os.fstat(mapped.fd)
                fd_open = True
            except OSError:
                fd_open = False
            held = [str(fd_open), str(bool(writer._files._files)), str(str(folder) in maps)]
            os.write(write_end, " ".join(held).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read) as answer:
        assert answer.read() == "False False False"
    assert os.waitpid(pid, 0)[1] == 0
    assert str(folder) in Path("/proc/self/maps").read_text()  # the worker's own: kept


def test_the_tier_leaves_a_quarter_free_for_others_at_most_64_mib() -> None:
    # a fixed 64 MiB refused the tier on any /dev/shm of 64 MiB (Docker's default)
    assert memtier.headroom(64 << 20) == 16 << 20
    assert memtier.headroom(8 << 30) == memtier.HEADROOM == 64 << 20


@pytest.mark.parametrize(
    ("persist", "said"),
    [
        (5, "every 5th step is saved to disk, blocking, instead"),
        # it said "checkpoints are saved blocking instead" when nothing was
        (None, "no snapshot is kept, so a crash costs the steps since the last save_state"),
    ],
)
def test_too_little_shared_memory_says_what_is_saved_instead(
    tmp_path: Path, persist: int | None, said: str
) -> None:
    assert said in memtier.full_message(tmp_path / "accel-x", 70 << 20, persist)
