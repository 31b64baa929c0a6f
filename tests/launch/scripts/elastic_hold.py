"""A worker of an elastic job that trains until its world shrinks after a restart.

``elastic_hold.py OUT``: every start writes OUT/start-<pid>.json, then all_reduces every
0.1 s. A start after a restart with one node's worth of ranks (the other node gone)
exits 0; anything else fails after 60 s.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with open(os.path.join(out, f"start-{os.getpid()}.json"), "w") as fh:
    json.dump({"rank": rank, "world": world, "restart": restart}, fh)
print(f"rank {rank} of {world}, restart {restart}", flush=True)
if restart >= 1 and world == int(os.environ["LOCAL_WORLD_SIZE"]):
    sys.exit(0)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    dist.all_reduce(torch.ones(1))
    time.sleep(0.1)
sys.exit(3)
