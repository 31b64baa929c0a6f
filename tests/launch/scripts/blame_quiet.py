"""Only rank 0 prints; it waits in one of accel's collectives while rank 1 sleeps.

argv: OUT MODE, MODE one of barrier (``acc.wait_for_everyone()``) or save (inside
``acc.save_state``'s arrival wait: rank 1 never calls it). Rank 1 never prints. Until
rank 0 begins to wait it beats (however slow the start on a loaded machine, the hang
watch sees rank 0 alive until then), and it prints a line just before.
"""

import os
import sys
import threading
import time

from accel.hang import heartbeat

mode = sys.argv[2]
waiting = threading.Event()


def beat() -> None:
    while not waiting.wait(0.2):
        heartbeat()


if os.environ["RANK"] == "0":
    threading.Thread(target=beat, daemon=True).start()

import torch  # noqa: E402 - after the heartbeat started

import accel  # noqa: E402

acc = accel.Accelerator(cpu=True)
model = acc.prepare(torch.nn.Linear(2, 2))


def stuck_in_sleep() -> None:
    time.sleep(600)


if acc.rank == 1:
    stuck_in_sleep()
acc.print("rank 0: training done, now waiting for the others", flush=True)
waiting.set()
if mode == "barrier":
    acc.wait_for_everyone()
else:
    acc.save_state(1)
