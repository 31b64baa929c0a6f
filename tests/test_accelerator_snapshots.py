"""Overlapped snapshots: ``save_state(step, async_save=True)`` returns before the state
is copied, and the copy is fenced before anything can change the state.

The background copy is held on an event that the fence sets (the ``_before_copy`` and
``_on_fence`` seams of accel.store.async_save): every change below happens while the
copy has not started, whatever the machine's speed, and nothing waits on a clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import accel
from accel.errors import UsageError
from accel.store import async_save
from accel.store.checkpoints import CheckpointInfo

Change = Callable[[accel.Accelerator, Any, Any], None]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Hold every background copy until something fences it; the fences, in order."""
    gate = threading.Event()
    fences: list[str] = []
    # Bounded: a copy nobody fences goes on after 60 s and the test's checks fail.
    monkeypatch.setattr(async_save, "_before_copy", lambda: gate.wait(60))

    def fenced() -> None:
        fences.append(threading.current_thread().name)
        gate.set()

    monkeypatch.setattr(async_save, "_on_fence", fenced)
    return fences


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, x: torch.Tensor) -> Any:
        return self.head(torch.relu(self.body(self.embed(x))))


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "tied":
        return Tied()
    layers = [torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(16, 4))
    if kind == "frozen":
        model[0].requires_grad_(False)
    if kind == "bf16":
        model = model.to(torch.bfloat16)
    return model


def _inputs(kind: str) -> torch.Tensor:
    if kind == "tied":
        return torch.randint(0, 10, (6, 3))
    return torch.randn(6, 8, dtype=torch.bfloat16 if kind == "bf16" else torch.float32)


def _setup(kind: str) -> tuple[accel.Accelerator, Any, Any]:
    acc = accel.Accelerator(seed=3, mixed_precision="bf16" if kind == "autocast" else None)
    model = _model(kind)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=0.01)
    model, opt = acc.prepare(model, opt)
    for _ in range(2):  # Adam has state (moments, step counts) before the first save
        _train_step(acc, model, opt, kind)
    return acc, model, opt


def _forward_backward(acc: accel.Accelerator, model: Any, kind: str) -> None:
    with acc.autocast():
        loss = model(_inputs(kind)).float().pow(2).mean()
    acc.backward(loss)


def _train_step(acc: accel.Accelerator, model: Any, opt: Any, kind: str) -> None:
    opt.zero_grad()
    _forward_backward(acc, model, kind)
    opt.step()


def _files(info: CheckpointInfo | None) -> dict[str, bytes]:
    assert info is not None
    return {name: (info.path / name).read_bytes() for name in info.files}


def _sync_then_overlapped(acc: accel.Accelerator, step: int) -> dict[str, bytes]:
    """The files of a synchronous save of the state as it is; then an overlapped save of
    the same state at the same step starts (its copy held)."""
    expected = _files(acc.save_state(step, async_save=False))
    assert acc.save_state(step, async_save=True) is None  # returned with the copy held
    return expected


KINDS = ["batchnorm", "tied", "frozen", "bf16", "autocast"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_overlapped_snapshot_is_the_sync_save_bit_for_bit(
    project: Path, held: list[str], kind: str
) -> None:
    acc, model, opt = _setup(kind)
    expected = _sync_then_overlapped(acc, 5)
    opt.zero_grad()
    _forward_backward(acc, model, kind)  # the next step overlaps the copy: BatchNorm's
    # running statistics and its batch count change in forward; they were copied already
    with torch.no_grad():
        if kind == "frozen":
            model[0].weight.mul_(2.0)  # no optimizer owns it: copied before save returned
        if kind != "tied":
            model[1].running_var.data.add_(1.0)  # a buffer, even through .data
    assert held == []
    opt.step()  # fences: the copy is whole before Adam moves anything
    assert len(held) == 1
    assert _files(acc.checkpoints.wait()) == expected
    acc.end()


def _load_model(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    model.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})


def _load_optimizer(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    state = opt.state_dict()
    for moments in state["state"].values():
        moments["exp_avg"] = torch.ones_like(moments["exp_avg"])
    opt.load_state_dict(state)


def _save_again(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    acc.save_state(6, async_save=False)


def _load_state(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    assert acc.load_state(5) == 5


def _after_the_fence(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    acc.wait_for_snapshot()
    for p in model.parameters():
        p.data.mul_(3.0)  # invisible to version counters: allowed once fenced


@pytest.mark.parametrize(
    "change", [_load_model, _load_optimizer, _save_again, _load_state, _after_the_fence]
)
def test_every_way_to_change_the_state_waits_for_the_copy(
    project: Path, held: list[str], change: Change
) -> None:
    acc, model, opt = _setup("batchnorm")
    expected = _sync_then_overlapped(acc, 5)
    change(acc, model, opt)
    assert len(held) == 1, "the change did not fence the copy"
    acc.checkpoints.wait()
    assert _files(acc.checkpoints.get(5)) == expected
    acc.end()


def test_end_fences_and_writes_the_snapshot(project: Path, held: list[str]) -> None:
    acc, _, _ = _setup("batchnorm")
    expected = _sync_then_overlapped(acc, 5)
    acc.end()
    assert len(held) == 1
    assert _files(acc.checkpoints.get(5)) == expected


def test_a_change_the_fence_did_not_see_fails_the_save_never_tears_it(
    project: Path, held: list[str]
) -> None:
    acc, model, _ = _setup("batchnorm")
    acc.save_state(4, async_save=False)
    acc.save_state(5, async_save=True)
    with torch.no_grad():
        model[0].weight.add_(1.0)  # an in-place write the optimizer does not own: seen
    async_save.fence_all()
    named = r"state\['models'\]\[0\]\['0.weight'\] changed while its snapshot"
    with pytest.raises(UsageError, match=named + r".*wait_for_snapshot"):
        acc.checkpoints.wait()
    assert [i.step for i in acc.checkpoints.list()] == [4]
    acc.end()


def test_an_optimizer_nobody_prepared_fences_a_store_snapshot(
    project: Path, held: list[str]
) -> None:
    ws = accel.Workspace.discover()
    weight = torch.nn.Parameter(torch.ones(1000))
    opt = torch.optim.SGD([weight], lr=1.0)
    weight.grad = torch.ones(1000)
    later = async_save.outside_optimizers([opt])
    assert ws.checkpoints.save({"w": weight.detach()}, 1, async_save=True, copy_now=later) is None
    opt.step()  # the global step pre-hook fences every optimizer's step
    assert len(held) == 1
    ws.checkpoints.wait()
    assert torch.equal(ws.checkpoints.load(1)["w"], torch.ones(1000))
    assert torch.equal(weight.detach(), torch.zeros(1000))
