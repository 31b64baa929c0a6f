"""When a snapshot of ``checkpoints.snapshot_every`` is whole: at once when nothing steps
after the optimizer, at the iteration's end when an LR scheduler does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

import accel
from accel.store import async_save, memtier
from accel.store.manifest import STATE_TENSORS
from accel.store.tensorfile import read_tree


@pytest.fixture
def tier(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A memory tier as accel launch gives its workers one, snapshots every step."""
    (project / "shm").mkdir()
    monkeypatch.setenv(memtier.BASE_ENV, str(project / "shm"))
    folder = memtier.make_tier("run-close")
    monkeypatch.setenv(memtier.DIR_ENV, str(folder))
    monkeypatch.setenv("ACCEL_CHECKPOINTS_SNAPSHOT_EVERY", "1")
    return folder


def one_step(with_scheduler: bool) -> tuple[accel.Accelerator, torch.optim.Optimizer, object]:
    acc = accel.Accelerator(cpu=True, seed=0)
    base = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(base.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5) if with_scheduler else None
    model, opt = acc.prepare(base, opt)
    if sched is not None:
        sched = acc.prepare(sched)
    acc.backward(model(torch.ones(2, 4)).sum())
    opt.step()
    return acc, opt, sched


def test_a_snapshot_is_whole_at_the_step_when_nothing_steps_after_the_optimizer(
    tier: Path,
) -> None:
    # Nothing else to wait for: the snapshot closes at the optimizer's step, so its
    # write ends without the next step (a rank killed as that step begins loses one).
    acc, _, _ = one_step(with_scheduler=False)
    snapshots = acc._snapshots
    assert snapshots is not None and snapshots.writer is not None
    _, written = snapshots._writers[-1]
    assert written.wait(timeout=60), "the snapshot waited for the next step"
    assert list(memtier.common_steps(tier, 1)) == [1]
    acc.end()


def test_a_snapshot_waits_for_the_scheduler_that_steps_after_the_optimizer(tier: Path) -> None:
    acc, opt, sched = one_step(with_scheduler=True)
    snapshots = acc._snapshots
    assert snapshots is not None and snapshots._taken is not None  # not whole yet
    assert list(memtier.common_steps(tier, 1)) == []
    sched.step()  # type: ignore[attr-defined]
    snapshots.settle()  # as the next step, a save, a load or the end
    assert list(memtier.common_steps(tier, 1)) == [1]
    (slot,) = memtier.slots(tier, 1)[0]
    name = STATE_TENSORS
    state, _ = read_tree(slot.path / name, slot.files[name]["size"], "cpu")
    # what save_state(1) at the iteration's end holds: the scheduler stepped once
    assert state["schedulers"] == [sched.state_dict()]  # type: ignore[attr-defined]
    assert state["schedulers"][0]["last_epoch"] == 1 and opt.param_groups[0]["lr"] == 0.05
    # and the learning rate the scheduler set in the optimizer after its step
    assert state["optimizers"][0]["param_groups"] == opt.state_dict()["param_groups"]
    acc.end()


def _slot_state(tier: Path, step: int) -> dict[str, object]:
    (slot,) = [s for s in memtier.slots(tier, 1)[0] if s.step == step]
    state, _ = read_tree(slot.path / STATE_TENSORS, slot.files[STATE_TENSORS]["size"], "cpu")
    return state


def _step(acc: accel.Accelerator, opt: torch.optim.Optimizer) -> None:
    acc.backward(acc._models[0](torch.ones(2, 4)).sum())
    opt.step()


@pytest.fixture
def copied(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per tensor copied into a snapshot pool's buffers."""
    copies: list[int] = []
    real_copy = async_save._copy_alone
    monkeypatch.setattr(
        async_save, "_copy_alone", lambda dst, src: copies.append(1) or real_copy(dst, src)
    )
    return copies


def test_a_snapshot_whole_at_the_step_is_written_from_the_training_tensors_once(
    tier: Path, copied: list[int]
) -> None:
    # Once the three slots hold files to rewrite in place, the optimizer's tensors go
    # straight into the tier, not into the pool's buffers first: one pass over the
    # state, not two. (A new file costs more than the copy: those are copied first.)
    acc, opt, _ = one_step(with_scheduler=False)
    model = acc._models[0]
    for step in range(1, 7):
        if step > 1:
            _step(acc, opt)
        acc._snapshots.join()  # type: ignore[union-attr]
        state = _slot_state(tier, step)
        weights = state["models"][0]  # type: ignore[index]
        assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items()), step
        assert state["optimizer_steps"] == step
        if step == 3:
            assert copied
            copied.clear()
    assert copied == []
    acc.end()


def test_a_change_during_a_one_pass_write_skips_that_snapshot(
    tier: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    acc, opt, _ = one_step(with_scheduler=False)
    for _ in range(2):
        _step(acc, opt)
    acc._snapshots.join()  # type: ignore[union-attr]
    assert list(memtier.common_steps(tier, 1)) == [1, 2, 3]
    gate = threading.Event()
    monkeypatch.setattr(async_save, "_before_copy", lambda: gate.wait(60))
    monkeypatch.setattr(async_save, "_on_fence", gate.set)
    _step(acc, opt)  # step 4: written in one pass, held until something fences it
    with torch.no_grad():
        acc._models[0].weight.add_(1.0)  # an in-place write the fence did not see
    async_save.fence_all()  # the write goes on, reads the changed tensor, sees it moved
    acc._snapshots.join()  # type: ignore[union-attr]
    assert list(memtier.common_steps(tier, 1)) == [2, 3]
    assert "the snapshot of step 4 was skipped" in capsys.readouterr().err
    acc.end()


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_writer_that_fails_before_it_copies_never_holds_the_next_step(
    tier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> bool:
        raise RuntimeError("the writer's thread died here")

    monkeypatch.setattr(memtier.SlotWriter, "ready", broken)
    acc, opt, _ = one_step(with_scheduler=False)  # its writer dies before any copy
    acc._snapshots._writers[-1][0].join()  # type: ignore[union-attr]
    _step(acc, opt)  # the fence of this step has nothing to wait for: no hang
    acc._snapshots.join()  # type: ignore[union-attr]
    assert list(memtier.common_steps(tier, 1)) == []
    acc.end()


def _end_of_iteration(acc: accel.Accelerator, sched: object) -> tuple[dict, object, object]:
    """What save_state at this moment writes of the weights, the scheduler and the
    optimizer's learning rate (the scheduler sets it after the step)."""
    weights = {k: v.clone() for k, v in acc._models[0].state_dict().items()}
    groups = acc._optimizers[0].state_dict()["param_groups"]
    return weights, sched.state_dict(), groups  # type: ignore[attr-defined]


def _holds(tier: Path, step: int, expected: tuple[dict, object, object]) -> None:
    state = _slot_state(tier, step)
    weights = state["models"][0]  # type: ignore[index]
    assert all(torch.equal(weights[k], v) for k, v in expected[0].items()), step
    assert state["schedulers"] == [expected[1]], step
    assert state["optimizers"][0]["param_groups"] == expected[2], step  # type: ignore[index]
    assert state["optimizer_steps"] == step


def _join_all_but_the_newest(acc: accel.Accelerator) -> None:
    snapshots = acc._snapshots
    assert snapshots is not None
    while len(snapshots._writers) > 1:
        snapshots._join_oldest()


def test_a_snapshot_closes_at_the_forward_after_the_scheduler_and_is_written_once(
    tier: Path, copied: list[int]
) -> None:
    # A loop with an LR scheduler steps it right after the optimizer: the snapshot is
    # whole at the next forward, and written from training's tensors in one pass while
    # that forward and backward run, holding what save_state at the iteration's end holds.
    acc, opt, sched = one_step(with_scheduler=True)
    for step in range(1, 8):
        sched.step()  # type: ignore[attr-defined]
        expected = _end_of_iteration(acc, sched)
        _step(acc, opt)  # its forward closes the snapshot of `step`, its step ends it
        _join_all_but_the_newest(acc)
        _holds(tier, step, expected)
        if step == 3:  # the first three slots are new files: copied first
            assert copied
            copied.clear()
    assert copied == []
    acc.end()


def test_a_scheduler_that_steps_after_a_forward_skips_that_snapshot_once(
    tier: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An evaluation's forward, then the scheduler (ReduceLROnPlateau's habit): what the
    # forward closed is not the iteration's end. That snapshot is dropped, never written
    # with the wrong scheduler, and the run's snapshots close at the next step from then.
    acc, opt, sched = one_step(with_scheduler=True)
    sched.step()  # type: ignore[attr-defined]
    _step(acc, opt)  # snapshot 1 closed at this forward, whole
    with torch.no_grad():
        acc._models[0](torch.ones(2, 4))  # an evaluation: its forward closes snapshot 2
    sched.step()  # type: ignore[attr-defined]
    expected = {2: _end_of_iteration(acc, sched)}
    for step in (3, 4):
        _step(acc, opt)
        sched.step()  # type: ignore[attr-defined]
        expected[step] = _end_of_iteration(acc, sched)
    _step(acc, opt)
    acc._snapshots.settle()  # type: ignore[union-attr]
    assert list(memtier.common_steps(tier, 1)) == [3, 4, 5]
    assert "the snapshot of step 2 was skipped: an LR scheduler changed" in capsys.readouterr().err
    for step in (3, 4):
        _holds(tier, step, expected[step])
    acc.end()


def test_a_registered_objects_tensors_are_those_of_the_iterations_end(
    tier: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An EMA of the weights, registered for checkpointing, moves on right after every
    # optimizer step. The snapshot reads it when the iteration ends; the tier must hold
    # those values, not the ones the EMA has by the time the writer gets to it.
    acc = accel.Accelerator(cpu=True, seed=0)
    base = torch.nn.Linear(4, 4)
    _, opt = acc.prepare(base, torch.optim.SGD(base.parameters(), lr=0.1))
    ema = torch.nn.Linear(4, 4)
    acc.register_for_checkpointing(ema)
    gate = threading.Event()
    real_write = memtier.SlotWriter.write
    monkeypatch.setattr(
        memtier.SlotWriter, "write", lambda *a, **k: gate.wait(60) and real_write(*a, **k)
    )
    _step(acc, opt)  # snapshot 1, open until the next step
    with torch.no_grad():
        ema.weight.fill_(1.0)  # iteration 1's update: what save_state(1) would hold
    _step(acc, opt)  # its pre-hook ends iteration 1; the writer waits at the gate
    with torch.no_grad():
        ema.weight.fill_(2.0)  # iteration 2's update, while snapshot 1 is written
    gate.set()
    acc._snapshots.settle()  # type: ignore[union-attr]
    custom = _slot_state(tier, 1)["custom"]
    assert torch.equal(custom[0]["weight"], torch.full((4, 4), 1.0))  # type: ignore[index]
    acc.end()


def test_a_script_with_two_optimizers_is_saved_blocking_at_the_iterations_end(
    tier: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A GAN steps its discriminator, then its generator: a snapshot at the first step
    # would hold the generator from before its step. One line, and the fallback: a
    # blocking save every persist_every steps, at the iteration's end.
    monkeypatch.setenv("ACCEL_CHECKPOINTS_PERSIST_EVERY", "1")
    acc = accel.Accelerator(cpu=True, seed=0)
    d, g = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    d, g, opt_d, opt_g = acc.prepare(
        d, g, torch.optim.SGD(d.parameters(), lr=0.1), torch.optim.SGD(g.parameters(), lr=0.1)
    )
    for _ in range(2):
        acc.backward(d(torch.ones(2, 4)).sum())
        opt_d.step()
        acc.backward(g(torch.ones(2, 4)).sum())
        opt_g.step()
    generator = {k: v.clone() for k, v in g.state_dict().items()}
    acc._snapshots.settle()  # type: ignore[union-attr]
    assert "this script steps 2; checkpoints are saved blocking" in capsys.readouterr().err
    assert memtier.slots(tier, 1) == {}
    saved = acc.checkpoints.load(2)
    assert all(torch.equal(saved["models"][1][k], v) for k, v in generator.items())
    acc.end()
