"""Accelerate's ``automatic_checkpoint_naming``: one folder per ``save_state()``, the
newest two kept, then ``load_state()`` of the newest; on every rank.

Each folder has a series (and a store) of its own. They must share one checkpoint group:
a gloo group holds three threads and a socket per peer on each rank until the process
ends, so a group per folder would run a 64-rank job out of descriptors (1024) by its
16th save.
Exits 0 when the threads and sockets after the last save are those after the second.
"""

import os

import torch
from held import held

from accel import Accelerator, ProjectConfiguration

SAVES = 8

config = ProjectConfiguration(project_dir=".", automatic_checkpoint_naming=True, total_limit=2)
accelerator = Accelerator(cpu=True, project_config=config)
model = accelerator.prepare(torch.nn.Linear(4, 1))
seen = []
for _ in range(SAVES):
    accelerator.save_state()
    seen.append(held())
accelerator.load_state()
assert sorted(os.listdir("checkpoints")) == [f"checkpoint_{SAVES - 2}", f"checkpoint_{SAVES - 1}"]
assert seen[-1] == seen[1], f"rank {accelerator.process_index}: (threads, sockets) {seen}"
accelerator.end()
