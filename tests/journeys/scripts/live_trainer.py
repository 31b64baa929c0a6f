"""A live run's training script: ``accel.Accelerator`` on CPU, a tiny DDP model, one
``save_state`` per step, until the file RELEASE exists (all ranks agree through an
all_reduce, so none leaves while another is inside a save). Usage: RELEASE."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import accel

release = Path(sys.argv[1])
acc = accel.Accelerator(cpu=True)
net = torch.nn.Linear(8, 4)
model, opt = acc.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
step = 0
while True:
    step += 1
    loss = model(torch.randn(16, 8)).square().mean()
    opt.zero_grad()
    acc.backward(loss)
    opt.step()
    acc.save_state(step)
    stop = torch.tensor([1.0 if release.exists() else 0.0])
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)
    if stop.item():
        break
    time.sleep(0.3)
acc.end()
print(f"trained {step} steps", flush=True)
