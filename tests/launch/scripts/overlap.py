"""Two jobs that must run at the same time: each waits for the other, then all_reduces.

argv: SHARED NAME OTHER. Rank 0 writes SHARED/NAME and waits for SHARED/OTHER.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

shared, name, other = sys.argv[1:4]
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    open(os.path.join(shared, name), "w").close()
    deadline = time.monotonic() + 90
    while not os.path.exists(os.path.join(shared, other)):
        if time.monotonic() > deadline:
            sys.exit(f"{other} never ran at the same time as {name}")
        time.sleep(0.05)
t = torch.tensor([1.0])
dist.all_reduce(t)
print(f"{name} world {dist.get_world_size()} sum {t.item()}")
dist.destroy_process_group()
