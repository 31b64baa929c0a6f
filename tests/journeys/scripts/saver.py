"""A live run's saver: checkpoints of a 4 MiB model in a loop, ``keep_last: 1`` (from
the environment). Prints ``ready`` after its first save; ends when stdin closes or
after ``MAX`` saves. Usage: WORKSPACE MAX."""

from __future__ import annotations

import select
import sys

import torch

from accel import Workspace

ckpts = Workspace(sys.argv[1]).checkpoints
model = {"w": torch.zeros(1024, 1024), "b": torch.zeros(16)}
for step in range(1, int(sys.argv[2]) + 1):
    model["b"][0] = step
    ckpts.save({"model": model, "step": step}, step)
    if step == 1:
        print("ready", flush=True)
    if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.read(1):
        break
