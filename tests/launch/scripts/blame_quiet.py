"""Only rank 0 prints; it waits in one of accel's collectives while rank 1 sleeps.

argv: OUT MODE, MODE one of barrier (``acc.wait_for_everyone()``) or save (inside
``acc.save_state``'s arrival wait: rank 1 never calls it). Rank 1 never prints.
"""

import sys
import time

import torch

import accel

mode = sys.argv[2]
acc = accel.Accelerator(cpu=True)
model = acc.prepare(torch.nn.Linear(2, 2))


def stuck_in_sleep() -> None:
    time.sleep(600)


if acc.rank == 1:
    stuck_in_sleep()
acc.print("rank 0: training done, now waiting for the others", flush=True)
if mode == "barrier":
    acc.wait_for_everyone()
else:
    acc.save_state(1)
