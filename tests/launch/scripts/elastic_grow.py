"""One worker start of an elastic job: record the world it got, then wait for more nodes.

``elastic_grow.py OUT TARGET``: every start writes OUT/start-<pid>.json. A world smaller
than TARGET waits (torch restarts it when a node joins) and fails after 60 s; a world of
TARGET all_reduces over gloo and exits 0.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

out, target = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
start = {"rank": rank, "world": world, "restart": os.environ["TORCHELASTIC_RESTART_COUNT"]}
if world == target:
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    start["all_reduce"] = t.item()
with open(os.path.join(out, f"start-{os.getpid()}.json"), "w") as fh:
    json.dump(start, fh)
print(f"rank {rank} of {world}", flush=True)
if world < target:
    time.sleep(60)
    sys.exit(3)
dist.destroy_process_group()
