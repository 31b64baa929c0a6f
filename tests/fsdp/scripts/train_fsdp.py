"""A small transformer-shaped model trained under FSDP, for the FSDP tests.

usage: train_fsdp.py TOTAL SAVE_EVERY CRASH OUT_DIR

CRASH, on the first attempt only (TORCHELASTIC_RESTART_COUNT 0), so that
`accel launch --max-restarts 1` restarts the workers:
  none       no crash
  step:N     rank 1 raises after optimizer step N
  shards:N   rank 1 is SIGKILLed inside the save of step N, its shard files written
  commit:N   rank 0 is SIGKILLed inside the save of step N, every shard written, just
             before the manifest that would commit it

Each rank writes OUT_DIR/rank-N.json (how its parameters are sharded, the step it
resumed from); rank 0 writes OUT_DIR/final.pt, acc.get_state_dict(model).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import accel


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Dropout(0.2),
            torch.nn.Linear(2 * width, width),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Net(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def sharding(model: torch.nn.Module) -> dict[str, object]:
    from torch.distributed.tensor import DTensor, Shard

    params = dict(model.named_parameters())
    return {
        "dtensor": all(isinstance(p, DTensor) for p in params.values()),
        "shard0": all(
            isinstance(p, DTensor) and p.placements == (Shard(0),) for p in params.values()
        ),
        "local": sum(p.to_local().numel() for p in params.values() if isinstance(p, DTensor)),
        "total": sum(p.numel() for p in params.values()),
        "fsdp_modules": sorted(
            name or "<root>"
            for name, m in model.named_modules()
            if type(m).__name__.startswith("FSDP")
        ),
    }


def arm(crash: str, rank: int) -> int:
    """Install the crash CRASH asks for; the step of a `step:N` crash (else -1)."""
    kind, _, at = crash.partition(":")
    if kind == "none" or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return -1
    if kind == "step":
        return int(at) if rank == 1 else -1
    from accel.store import sharded as sharded_mod
    from accel.store.checkpoints import Checkpoints

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if kind == "shards" and rank == 1:
        dcp_save = sharded_mod.save

        def save(sharded: Any, folder: Path, ctx: Any) -> Any:
            written = dcp_save(sharded, folder, ctx)
            if folder.parent.name.startswith(f".tmp-{int(at):012d}-"):
                die()
            return written

        sharded_mod.save = save
    if kind == "commit" and rank == 0:
        commit = Checkpoints._commit

        def before_commit(self: Any, tmp: Path, series: str, step: int, *args: Any) -> Any:
            if step == int(at):
                assert any(tmp.glob("sharded/__1_*.distcp")), "rank 1's shard is missing"
                die()
            return commit(self, tmp, series, step, *args)

        Checkpoints._commit = before_commit  # type: ignore[method-assign]
    return -1


def main(total: int, save_every: int, crash: str, out: Path) -> None:
    acc = accel.Accelerator(seed=7)
    crash_at = arm(crash, acc.rank)
    torch.manual_seed(acc.rank)  # different on every rank: prepare() syncs rank 0's weights
    random.seed(acc.rank)
    np.random.seed(acc.rank)
    data = torch.Generator().manual_seed(1)
    x_all, y_all = torch.randn(96, 8, generator=data), torch.randn(96, 1, generator=data)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.7)
    loader = DataLoader(TensorDataset(x_all, y_all), batch_size=4, shuffle=True)
    model, opt, sched, loader = acc.prepare(model, opt, sched, loader)
    resumed = acc.load_state()
    report = {"rank": acc.rank, "resumed": resumed, **sharding(model)}
    (out / f"rank-{acc.rank}.json").write_text(json.dumps(report))
    step = resumed or 0
    while step < total:
        epoch, done = divmod(step, len(loader))
        loader.set_epoch(epoch)
        loader.skip_batches(done)
        for x, y in loader:
            x, y = x.to(acc.device), y.to(acc.device)
            jitter = random.random() * 1e-3 + float(np.random.rand()) * 1e-3
            loss = ((model(x) - y) ** 2).mean() * (1.0 + jitter)
            opt.zero_grad()
            acc.backward(loss)
            opt.step()
            sched.step()
            step += 1
            acc.log({"loss": loss}, step)
            if step == crash_at:
                raise RuntimeError(f"simulated crash at step {step}")
            if step % save_every == 0:
                acc.save_state(step)
            if step >= total:
                break
    full = acc.get_state_dict(model)
    if acc.is_main_process:
        torch.save(full, out / "final.pt")
    else:
        assert full == {}, "a rank other than 0 got a state dict"
    acc.end()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
