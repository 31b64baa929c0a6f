"""Log a loss that becomes NaN at step 5 and a grad norm that becomes inf at step 7.

Steps take 0.1 s each, 40 of them: a run stopped by logs.on_nonfinite ends well before.
"""

import math
import time

import accel

acc = accel.Accelerator(cpu=True)
for step in range(40):
    loss = math.nan if step >= 5 else 1.0 / (step + 1)
    grad = math.inf if step >= 7 else 0.5
    acc.log({"loss": loss, "grad_norm": grad, "lr": 0.1}, step)
    print(f"step {step}", flush=True)
    time.sleep(0.1)
acc.end()
