"""Two ranks check what prepare() does under FSDP; exits 0 when everything holds.

usage: fsdp_checks.py MODE   (FSDP is on when the test sets ACCELERATE_USE_FSDP=true)

  prepare  rank 0's weights on every rank; optimizers made before prepare(), in either
           order, step the sharded parameters; clip_grad_norm_; get_state_dict;
           save_state / load_state restore model and optimizer; async saves refused
  fp16     an overflow in one rank's shard skips the step on every rank
  save     train a step and save_state(1); rank 0 prints the weights' digest
  load     load_state() into a fresh process (its optimizer has no state yet): rank 0
           prints the weights' digest, or the refusal (exit 3)

Precision comes from ACCELERATE_MIXED_PRECISION, as under a launcher.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.distributed as dist

import accel
from accel.errors import UsageError


def model_and_optimizer(
    seed: int, variant: str = ""
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model; ``variant``: its definition changed since the save (``wider``: a
    layer of another shape, ``deeper``: one more layer, ``shallower``: one fewer)."""
    torch.manual_seed(seed)
    hidden = 10 if variant == "wider" else 8
    layers = [torch.nn.Linear(6, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2)]
    if variant == "deeper":
        layers.append(torch.nn.Linear(2, 2))
    if variant == "shallower":
        layers = layers[:2]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    torch.manual_seed(100 + acc.rank)
    loss = model(torch.randn(4, 6)).pow(2).mean()
    opt.zero_grad()
    acc.backward(loss)
    opt.step()


def same_on_every_rank(value: torch.Tensor) -> bool:
    gathered = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, value)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def local(model: Any) -> list[torch.Tensor]:
    return [p.to_local().detach().clone() for p in model.parameters()]


def check_prepare(acc: accel.Accelerator) -> None:
    from torch.distributed.tensor import DTensor

    assert acc.fsdp is not None, "ACCELERATE_USE_FSDP=true was not honoured"
    model, opt = model_and_optimizer(seed=acc.rank)  # different weights on each rank
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    model, opt = acc.prepare(model, opt)
    other, other_opt = model_and_optimizer(seed=5)
    other_opt, other = acc.prepare(other_opt, other)  # the optimizer first this time
    for m, o in ((model, opt), (other, other_opt)):
        params = list(m.parameters())
        assert all(isinstance(p, DTensor) for p in params)
        assert [id(p) for p in o.param_groups[0]["params"]] == [id(p) for p in params]

    relu = acc.prepare(torch.nn.ReLU())  # nothing to shard: left as it is, saved as it is
    assert type(relu) is torch.nn.ReLU
    acc.save_state(0)  # a fresh optimizer is saved as it is: it must not take a step
    assert not opt.state and not other_opt.state
    full = acc.get_state_dict(model)  # a collective: every rank calls it
    if acc.is_main_process:
        assert full.keys() == initial.keys()
        assert all(torch.equal(full[k], initial[k]) for k in full), "not rank 0's weights"
    else:
        assert full == {}

    before = local(model)
    step(acc, model, opt)
    assert all(not torch.equal(a, b) for a, b in zip(before, local(model), strict=True))
    norm = acc.clip_grad_norm_(model.parameters(), 1.0)
    assert type(norm) is torch.Tensor and same_on_every_rank(norm.reshape(1))

    try:
        acc.save_state(1, async_save=True)
    except UsageError as exc:
        assert "sharded state is saved synchronously" in str(exc), exc
    else:
        raise AssertionError("an async save of sharded state was accepted")
    acc.save_state(1)
    saved = local(model) + local(other)
    momentum = [opt.state[p]["momentum_buffer"].to_local().clone() for p in model.parameters()]
    step(acc, model, opt)
    step(acc, other, other_opt)
    assert acc.load_state() == 1
    assert all(torch.equal(a, b) for a, b in zip(saved, local(model) + local(other), strict=True))
    for p, m in zip(model.parameters(), momentum, strict=True):
        assert torch.equal(opt.state[p]["momentum_buffer"].to_local(), m)
    assert acc.load_state(0) == 0 and not opt.state  # back to the untrained start
    full = acc.get_state_dict(model)
    assert all(torch.equal(full[k], initial[k]) for k in full)


def check_fp16(acc: accel.Accelerator) -> None:
    assert acc.scaler is not None
    model, opt = acc.prepare(*model_and_optimizer(seed=0))
    scale = acc.scaler.get_scale()
    before = local(model)
    torch.manual_seed(1)
    with acc.autocast():
        loss = model(torch.randn(4, 6)).float().pow(2).mean()
    opt.zero_grad()
    acc.backward(loss)
    if acc.rank == 1:  # an overflow that only rank 1's shard holds
        next(model.parameters()).grad.to_local().view(-1)[0] = float("inf")
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, local(model), strict=True)), "stepped"
    assert acc.scaler.get_scale() == scale / 2
    step(acc, model, opt)  # and without an overflow, every rank steps
    assert all(not torch.equal(a, b) for a, b in zip(before, local(model), strict=True))


def digest(acc: accel.Accelerator, model: Any, opt: Any) -> None:
    """Rank 0 prints every weight and the optimizer state, to compare two processes."""
    full = acc.get_state_dict(model)
    states = [opt.state[p] for p in model.parameters()]
    moments = [
        v.full_tensor() if hasattr(v, "full_tensor") else v
        for state in states
        for _, v in sorted(state.items())
    ]
    if acc.is_main_process:
        print("digest", [t.tolist() for t in full.values()], [m.tolist() for m in moments])


def save_and_load(acc: accel.Accelerator, mode: str) -> None:
    model, opt = acc.prepare(*model_and_optimizer(seed=0, variant=mode.partition(":")[2]))
    if mode == "save":
        step(acc, model, opt)
        acc.save_state(1)
        digest(acc, model, opt)
        return
    try:
        assert acc.load_state() == 1
    except UsageError as exc:
        if acc.is_main_process:
            print(f"refused: {exc}", flush=True)
        raise SystemExit(3) from None
    digest(acc, model, opt)


def main(mode: str) -> None:
    acc = accel.Accelerator(mixed_precision="fp16" if mode == "fp16" else None)
    if mode == "prepare":
        check_prepare(acc)
    elif mode == "fp16":
        check_fp16(acc)
    else:
        save_and_load(acc, mode)
    acc.end()
    print("fsdp_checks: returned", file=sys.stderr, flush=True)  # the test's teardown rule


if __name__ == "__main__":
    main(sys.argv[1])
