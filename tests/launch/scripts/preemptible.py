"""Training that saves when the job is asked to stop. ``preemptible.py OUT STEPS``: one
step at a time from the latest checkpoint; after each, ``should_stop()``: when asked,
save that step and return. At the end rank 0 writes the weights to OUT/final.json."""

import json
import os
import sys
import time

import torch

from accel import Accelerator

out, steps = sys.argv[1], int(sys.argv[2])
acc = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05))
start = acc.load_state() or 0
if start:
    print(f"resumed at step {start}", flush=True)
for step in range(start, steps):
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1000 * step + acc.rank))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    acc.backward(loss)
    opt.step()
    print(f"step {step + 1} done", flush=True)
    if acc.should_stop():
        acc.save_state(step + 1)
        print(f"stop asked: saved step {step + 1}", flush=True)
        sys.exit(0)
    time.sleep(0.05)
if acc.is_main_process:
    weights = [p.detach().tolist() for p in acc.unwrap_model(model).parameters()]
    with open(os.path.join(out, "final.json"), "w") as fh:
        json.dump(weights, fh)
