"""Start a daemon that hides from the run: a grandchild with an empty environment (no
ACCEL_RUN_ID) that double-forks into its own session, closes its descriptors and sleeps.

argv: OUT [--stay]  (--stay: the worker sleeps too, instead of ending the run)
Writes OUT/daemon-<rank> with the daemon's pid and whether it sees ACCEL_RUN_ID (0/1).
"""

import os
import subprocess
import sys
import time

out, args = sys.argv[1], sys.argv[2:]
rank = os.environ["RANK"]
DAEMON = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in range(3):
    os.close(fd)
path = sys.argv[1]
with open(path + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {int('ACCEL_RUN_ID' in os.environ)}")
os.rename(path + ".tmp", path)
time.sleep(300)
"""
target = os.path.join(out, f"daemon-{rank}")
subprocess.run([sys.executable, "-c", DAEMON, target], env={}, check=True)
while not os.path.exists(target):
    time.sleep(0.01)
print(f"rank {rank} left a daemon", flush=True)
if "--stay" in args:
    time.sleep(300)
