"""A tiny training run for the resume tests: prints nothing, writes its final weights.

usage: train.py TOTAL_STEPS SAVE_EVERY CRASH_AT OUT_FILE   (CRASH_AT -1: no crash)
Every RNG the worker API restores is drawn from (python, numpy, torch via dropout).
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import accel


def main(total: int, save_every: int, crash_at: int, out: str) -> None:
    acc = accel.Accelerator(seed=7)
    torch.manual_seed(0)  # the same initial weights on every rank
    random.seed(acc.rank)
    np.random.seed(acc.rank)
    data = torch.Generator().manual_seed(1)
    x_all, y_all = torch.randn(64, 8, generator=data), torch.randn(64, 1, generator=data)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    loader = DataLoader(TensorDataset(x_all, y_all), batch_size=4, shuffle=True)
    model, opt, sched, loader = acc.prepare(model, opt, sched, loader)
    per_epoch = len(loader)
    step = acc.load_state() or 0
    while step < total:
        epoch, done = divmod(step, per_epoch)
        loader.set_epoch(epoch)
        loader.skip_batches(done)
        for x, y in loader:
            jitter = random.random() * 1e-3 + float(np.random.rand()) * 1e-3
            loss = ((model(x) - y) ** 2).mean() * (1.0 + jitter)
            opt.zero_grad()
            acc.backward(loss)
            opt.step()
            sched.step()
            step += 1
            acc.log({"loss": loss, "lr": sched.get_last_lr()[0]}, step)
            if step % save_every == 0:
                acc.save_state(step)
            if step == crash_at:
                acc.checkpoints.wait()  # an async save of an earlier step is committed
                os._exit(3)  # killed: no teardown, nothing flushed
            if step >= total:
                break
    if acc.is_main_process:
        torch.save([p.detach().clone() for p in acc.unwrap_model(model).parameters()], out)
    acc.end()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
