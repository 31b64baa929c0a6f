"""Two ranks without a launcher, their Accelerator collected before exit, no end().

argv: OUT MODE. ``both``: every rank raises. ``stuck``: rank 0 raises while rank 1 waits
in a barrier rank 0 never reaches (a peer stuck mid-collective). ``late``: both return,
rank 1 two seconds after rank 0, and writes OUT/late (the time its script ended). An exit
handler registered before accel's (so run after it) writes OUT/exit-R: the time and
whether rank R's group still stands.
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
    with open(os.path.join(out, f"exit-{rank}"), "w") as fh:
        fh.write(f"{time.time()} {dist.is_initialized()}")


atexit.register(report)


def main() -> None:
    acc = accel.Accelerator(cpu=True)
    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == acc.world_size
    if mode == "stuck" and rank == 1:
        dist.barrier()  # rank 0 never comes: gloo fails this once rank 0 is gone
    if mode == "late" and rank == 1:
        time.sleep(2)
        with open(os.path.join(out, "late"), "w") as fh:
            fh.write(str(time.time()))


main()  # the Accelerator is garbage now: only accel's exit handler knows the group
if mode == "both" or (mode == "stuck" and rank == 0):
    raise RuntimeError(f"rank {rank} crashed")
