"""Two ranks: rank 0 waits in a barrier while rank 1 dies (or hangs) as MODE says.

argv: OUT MODE, MODE one of kill (the test SIGKILLs rank 1), segv, raise, hang.
From the first restart on, both ranks just meet in a barrier and finish.
"""

import ctypes
import os
import sys
import threading
import time

started = threading.Event()


def say_starting():
    # A printed line is activity to the hang watch: until the group is up (importing
    # torch alone takes several seconds on a loaded 2-core machine, more than the tests'
    # hang timeout), a rank says so, and the quiet the watch sees is the one MODE makes.
    while not started.wait(0.5):
        print(f"rank {os.environ['RANK']} starting", flush=True)


threading.Thread(target=say_starting, daemon=True).start()

import torch.distributed as dist  # noqa: E402 - after the thread that covers its import

out, mode = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)
with open(os.path.join(out, f"pid-{rank}"), "w") as fh:
    fh.write(str(os.getpid()))
print(f"rank {rank} ready", flush=True)
started.set()


def stuck_in_sleep():
    time.sleep(600)


def wait_for_rank0():
    while not os.path.exists(os.path.join(out, "in-barrier-0")):
        time.sleep(0.05)
    time.sleep(0.3)


if rank == 0:
    open(os.path.join(out, "in-barrier-0"), "w").close()
    dist.barrier()
elif mode in ("kill", "hang"):
    stuck_in_sleep()
elif mode == "segv":
    wait_for_rank0()
    ctypes.string_at(0)
elif mode == "raise":
    wait_for_rank0()
    raise ValueError("bad batch on rank 1")
