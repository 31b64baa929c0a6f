"""A script that starts its group itself (as a Trainer's, Lightning's, torchrun's do):
each attempt's ranks meet on one store, write what they were given, and rank 1 fails the
first attempt after the group has met there."""

import json
import os
import sys
import time

import torch.distributed as dist

out = sys.argv[1]
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
given = {name: os.environ[name] for name in ("MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")}
dist.init_process_group("gloo")
seen = [None] * dist.get_world_size()
dist.all_gather_object(seen, int(rank))
given["gathered"] = seen
with open(os.path.join(out, f"attempt-{attempt}-rank-{rank}.json"), "w") as fh:
    json.dump(given, fh)
dist.barrier()
if attempt == "0" and rank == "1":
    os._exit(3)
# Every rank past its last collective before any leaves, and none destroys its group:
# torch 2.6's destroy_process_group hung (gloo) in 1 run in 10-20 beside two CPU hogs,
# once its peer had left, whichever process hosted the store.
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
store.add("left", 1)
while store.add("left", 0) < dist.get_world_size():
    time.sleep(0.01)
os._exit(0)
