"""Run examples/train.py, but rank 1 is SIGKILLed in the first attempt.

argv: WHERE EXAMPLE N [example args...]

WHERE is ``step`` (at the start of its N-th optimizer step) or ``write`` (while it
writes its snapshot of step N into the memory tier, after the file's first bytes).
"""

import os
import runpy
import signal
import sys

import torch

where, example, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.argv = [example, *sys.argv[4:]]
doomed = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "1"


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if doomed and where == "step":
    calls = 0
    original_step = torch.optim.SGD.step

    def step(self, *args, **kwargs):
        global calls
        calls += 1
        if calls == kill_at:
            die()
        return original_step(self, *args, **kwargs)

    torch.optim.SGD.step = step
elif doomed and where == "write":
    from accel.store import memtier

    original_write = memtier.SlotWriter.write

    def write(self, step, series, trees, **kwargs):
        if step == kill_at:

            def torn(tree, path):
                path.write_bytes(b"half a snapshot")
                die()

            memtier.write_in_memory = torn
        return original_write(self, step, series, trees, **kwargs)

    memtier.SlotWriter.write = write
runpy.run_path(example, run_name="__main__")
