"""Run examples/train.py deterministically on CUDA; the last rank may crash once.

argv: EXAMPLE CRASH_AT [example args...]   (CRASH_AT 0: never)

The crash is at the CRASH_AT-th optimizer step of the first attempt, on the last rank
(so it works with one GPU too). Deterministic algorithms are on: a resumed run must end
with the same weights as an uninterrupted one, bit for bit.
"""

import os
import runpy
import sys

import torch

example, crash_at = sys.argv[1], int(sys.argv[2])
sys.argv = [example, *sys.argv[3:]]
torch.use_deterministic_algorithms(True)  # needs CUBLAS_WORKSPACE_CONFIG (set by the test)
torch.backends.cudnn.benchmark = False
last_rank = int(os.environ["WORLD_SIZE"]) - 1
crashes = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and int(os.environ["RANK"]) == last_rank
calls = 0
original_step = torch.optim.SGD.step


def step(self, *args, **kwargs):
    global calls
    calls += 1
    if crashes and calls == crash_at:
        raise RuntimeError(f"simulated crash at step {calls}")
    return original_step(self, *args, **kwargs)


torch.optim.SGD.step = step
runpy.run_path(example, run_name="__main__")
