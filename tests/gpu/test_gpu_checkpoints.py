"""CUDA state through the store's checkpoints: sync save/load, async save, onto the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gpuutil import GPU

from accel.workspace import Workspace

pytestmark = GPU


def _cuda_state() -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 8)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(16, 512, device="cuda")).sum().backward()
    opt.step()  # optimizer state (exp_avg, ...) lives on the GPU too
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "rng": torch.cuda.get_rng_state(),
        "half": torch.randn(64, 64, device="cuda", dtype=torch.bfloat16),
    }


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    return a == b


@pytest.mark.timeout(120)
def test_cuda_state_saves_and_loads_back_onto_the_gpu(project: Path) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    state = _cuda_state()
    ws.checkpoints.save(state, 1, async_save=False)
    loaded = ws.checkpoints.load(1, map_location="cuda")
    assert _equal(state, loaded)
    assert loaded["model"]["0.weight"].device.type == "cuda"
    assert ws.checkpoints.load(1)["model"]["0.weight"].device.type == "cpu"


@pytest.mark.timeout(120)
def test_async_save_snapshots_cuda_tensors_before_training_goes_on(project: Path) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    state = _cuda_state()
    expected = {k: v.clone() for k, v in state["model"].items()}  # type: ignore[attr-defined]
    assert ws.checkpoints.save(state, 2, async_save=True) is None
    for tensor in state["model"].values():  # type: ignore[attr-defined]
        tensor.add_(1.0)  # the next training step, while the save is in flight
    ws.checkpoints.wait()
    loaded = ws.checkpoints.load(2, map_location="cuda")
    assert _equal(expected, loaded["model"])


@pytest.mark.timeout(180)
def test_an_overlapped_save_copies_the_cuda_state_on_a_side_stream_while_training_goes_on(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27, item 3: what only the optimizer changes is copied device-to-host into
    # pinned, reused buffers on a side stream, beside the next forward and backward; the
    # next optimizer step waits for that copy, and the checkpoint is the state at the save.
    import accel
    from accel.store import async_save

    monkeypatch.chdir(project)
    acc = accel.Accelerator(seed=0)
    assert acc.device.type == "cuda"
    net = torch.nn.Sequential(
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 8)
    )
    model, opt = acc.prepare(net, torch.optim.AdamW(net.parameters(), lr=1e-3))
    x = torch.randn(256, 2048, device=acc.device)

    def step() -> None:
        opt.zero_grad()
        acc.backward(model(x).pow(2).mean())
        opt.step()

    step()
    acc.save_state(1, async_save=True)
    expected = {
        "model": {k: v.cpu().clone() for k, v in acc.unwrap_model(model).state_dict().items()},
        "exp_avg": [opt.state[p]["exp_avg"].cpu().clone() for p in net.parameters()],
    }
    for _ in range(3):
        step()  # the first one's step waits for the copy (the fence), then moves the state
    acc.checkpoints.wait()
    assert any(d.type == "cuda" for d in async_save._side_streams)  # the side stream copied
    saved = acc.checkpoints.load(1)
    assert _equal(expected["model"], saved["models"][0])
    moments = [s["exp_avg"] for s in saved["optimizers"][0]["state"].values()]
    assert all(torch.equal(a, b) for a, b in zip(expected["exp_avg"], moments, strict=True))
    acc.end()
