"""Rank 1's script returns (or calls sys.exit(0)), then its teardown goes wrong as MODE says.

argv: OUT MODE, MODE one of:
  abort     an exit handler aborts the process (as gloo's "terminate called ..." does)
  segv      an exit handler dies of SIGSEGV
  hang      the interpreter hangs after the exit handlers (an object's __del__ that sleeps,
            as a gloo thread join that never returns)
  handler   an exit handler sleeps forever
Rank 1 writes OUT/rank-1.pid (to check it is gone) and OUT/rank-1.returned when its
script's last line ran.
"""

import atexit
import ctypes
import os
import signal
import sys
import time

out, mode = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]


class HangsWhenCollected:
    def __del__(self) -> None:
        time.sleep(3600)


def segv() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)
    ctypes.string_at(0)


if rank == "1":
    with open(os.path.join(out, "rank-1.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    if mode == "abort":
        atexit.register(os.abort)
    elif mode == "segv":
        atexit.register(segv)
    elif mode == "hang":
        keep = HangsWhenCollected()  # collected as __main__ is torn down, after atexit
    elif mode == "handler":
        atexit.register(time.sleep, 3600)
    with open(os.path.join(out, "rank-1.returned"), "w") as fh:
        fh.write(mode)
print(f"rank {rank} done", flush=True)
sys.exit(0)
