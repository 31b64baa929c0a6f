"""A script that starts its group itself (as a Trainer's, Lightning's, torchrun's do):
each attempt's ranks meet on one store, write what they were given, and rank 1 fails the
first attempt after the group has met there."""

import json
import os
import sys

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
dist.destroy_process_group()
