"""Dump this rank's environment and argv to OUT/rank-N.json; optionally all_reduce over gloo."""

import json
import os
import sys

out, args = sys.argv[1], sys.argv[2:]
data = {"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0]}
if "--all-reduce" in args:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    data["all_reduce"] = t.item()
    dist.destroy_process_group()
with open(os.path.join(out, f"rank-{os.environ['RANK']}.json"), "w") as fh:
    json.dump(data, fh)
print(f"hello from rank {os.environ['RANK']}")
print(f"stderr line from rank {os.environ['RANK']}", file=sys.stderr)
