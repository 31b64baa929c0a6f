"""Log metrics through the worker API (main rank, and every rank with all_ranks=True)."""

import time

import accel

acc = accel.Accelerator(cpu=True)
for step in range(12):
    end = time.time() + 0.1
    while time.time() < end:  # some CPU work for the resource sampler to see
        pass
    acc.log({"loss": 1.0 / (step + 1), "lr": 0.1 * 0.9**step}, step)
    acc.log({"rank_value": float(acc.rank)}, step, all_ranks=True)
    print(f"step {step} loss={1.0 / (step + 1):.4f}", flush=True)
acc.end()
