"""Train a step with accel.Accelerator inside main() and never call acc.end().

argv: OUT [crash]. An atexit handler registered before accel's runs after it (atexit is
LIFO) and writes whether the process group still stands at that moment into
OUT/rank-R.attempt-A. With ``crash``, rank 1 fails in the first attempt.
"""

import atexit
import os
import sys

import torch
import torch.distributed as dist

import accel

out, crash = sys.argv[1], sys.argv[2:] == ["crash"]
rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]


def report() -> None:
    with open(os.path.join(out, f"rank-{rank}.attempt-{attempt}"), "w") as fh:
        fh.write(str(dist.is_initialized()))


atexit.register(report)


def main() -> None:
    acc = accel.Accelerator(cpu=True)
    total = torch.ones(1)
    dist.all_reduce(total)
    if crash and attempt == "0" and acc.rank == 1:
        raise RuntimeError("simulated crash")
    assert total.item() == acc.world_size


main()  # the Accelerator is garbage once main() returns: nothing refers to it at exit
