"""A real tqdm bar (on stderr) whose updates come when the test says so.

argv: OUT STEPS. While the bar shows i/STEPS, waits for OUT/go-<i>.
"""

import os
import sys
import time

from tqdm import tqdm

out, steps = sys.argv[1], int(sys.argv[2])
print("before the bar", flush=True)
for i in tqdm(range(steps), desc="bar", ascii=True, mininterval=0, miniters=1):
    while not os.path.exists(os.path.join(out, f"go-{i}")):
        time.sleep(0.02)
print("after the bar", flush=True)
