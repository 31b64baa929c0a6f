"""Run examples/train.py deterministically on CUDA; the last rank may crash once.

argv: EXAMPLE CRASH_AT [example args...]   (CRASH_AT 0: never)

The crash is at training step CRASH_AT of the first attempt (counted by
``optimizer.zero_grad()``, once per step: an fp16 step the scaler skips still counts),
on the last rank, so it works with one GPU too. Deterministic algorithms are on: a
resumed run must end with the same weights as an uninterrupted one, bit for bit.
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
steps = 0
original_zero_grad = torch.optim.SGD.zero_grad


def zero_grad(self, *args, **kwargs):
    global steps
    steps += 1
    if crashes and steps == crash_at:
        raise RuntimeError(f"simulated crash at step {steps}")
    return original_zero_grad(self, *args, **kwargs)


torch.optim.SGD.zero_grad = zero_grad
runpy.run_path(example, run_name="__main__")
