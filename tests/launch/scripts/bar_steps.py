"""A tqdm-style bar on stderr whose updates come when the test says so.

argv: OUT STEPS. Writes "\\r<i>/<STEPS> bar" (no newline) then waits for OUT/go-<i>.
"""

import os
import sys
import time

out, steps = sys.argv[1], int(sys.argv[2])
print("before the bar", flush=True)
for i in range(steps):
    sys.stderr.write(f"\r{i}/{steps} bar")
    sys.stderr.flush()
    while not os.path.exists(os.path.join(out, f"go-{i}")):
        time.sleep(0.02)
sys.stderr.write(f"\r{steps}/{steps} bar\n")
print("after the bar", flush=True)
