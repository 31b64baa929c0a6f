"""Save steps 1..3 (the test holds the series' readers lock meanwhile), say so in
OUT/saved, then wait for OUT/go and end without another save."""

import sys
import time
from pathlib import Path

import torch

import accel

out = Path(sys.argv[1])
acc = accel.Accelerator(cpu=True)
model = acc.prepare(torch.nn.Linear(2, 2))
for step in (1, 2, 3):
    acc.save_state(step=step)
if acc.rank == 0:
    (out / "saved").touch()
while not (out / "go").exists():
    time.sleep(0.02)
acc.end()
