"""A rank that raises after an all_reduce, with no launcher and its Accelerator collected.

argv: OUT MODE. ``both``: every rank raises. ``stuck``: rank 0 raises while rank 1 waits
in a barrier that rank 0 never reaches (a peer stuck mid-collective). An exit handler
registered before accel's (so run after it) writes whether the group still stands into
OUT/rank-R.
"""

import atexit
import os
import sys
import time

import torch
import torch.distributed as dist

import accel

out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])


def report() -> None:
    with open(os.path.join(out, f"rank-{rank}"), "w") as fh:
        fh.write(str(dist.is_initialized()))


atexit.register(report)


def main() -> None:
    acc = accel.Accelerator(cpu=True)
    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == acc.world_size
    if mode == "stuck" and rank == 1:
        try:
            dist.barrier()  # rank 0 never comes: gloo fails this once rank 0 is gone
        finally:
            time.sleep(0.2)
        return


main()  # the Accelerator is garbage now: only accel's exit handler knows the group
if mode == "both" or rank == 0:
    raise RuntimeError(f"rank {rank} crashed")
