"""Rank 0 broadcasts on the checkpoint group (1 s timeout); rank 1 never joins it in time."""

import os
import time

import torch.distributed as dist

from accel.store.collectives import current_context

dist.init_process_group("gloo")
ctx = current_context(None, timeout=1.0)
if ctx.rank == 0:
    ctx.broadcast({"hello": 1})
else:
    time.sleep(8)
print(f"rank {os.environ['RANK']} done", flush=True)
