"""Two ranks without a launcher; rank 1 reaches its exit 2 s after rank 0. No end().

argv: OUT. Rank 1 writes OUT/late (the time its script ended); an exit handler registered
before accel's (so run after it) writes OUT/exit-R: the time rank R's group was gone.
"""

import atexit
import os
import sys
import time

import torch
import torch.distributed as dist

import accel

out = sys.argv[1]
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
    if rank == 1:
        time.sleep(2)
        with open(os.path.join(out, "late"), "w") as fh:
            fh.write(str(time.time()))


main()
