"""Run examples/train.py, but rank 1 crashes at optimizer step N of the first attempt.

argv: EXAMPLE N [example args...]
"""

import os
import runpy
import sys

import torch

example, crash_at = sys.argv[1], int(sys.argv[2])
sys.argv = [example, *sys.argv[3:]]
first_attempt = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
calls = 0
original_step = torch.optim.SGD.step


def step(self, *args, **kwargs):
    global calls
    calls += 1
    if first_attempt and os.environ["RANK"] == "1" and calls == crash_at:
        raise RuntimeError(f"simulated crash at step {calls}")
    return original_step(self, *args, **kwargs)


torch.optim.SGD.step = step
runpy.run_path(example, run_name="__main__")
