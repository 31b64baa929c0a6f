"""Start a grandchild, say ready (pid file per rank), then sleep or fail.

argv: OUT [--fail-rank R] [--ignore-term-rank R] [--ignore-int]
"""

import os
import signal
import subprocess
import sys
import time

out, args = sys.argv[1], sys.argv[2:]
rank = int(os.environ["RANK"])


def opt(name):
    return int(args[args.index(name) + 1]) if name in args else None


if opt("--ignore-term-rank") == rank:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "--ignore-int" in args:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.path.join(out, f"ready-{rank}"), "w") as fh:
    fh.write(f"{os.getpid()} {child.pid}")
print(f"rank {rank} ready", flush=True)


def fail_here():
    raise RuntimeError(f"deliberate failure on rank {rank}")


if opt("--fail-rank") == rank:
    time.sleep(0.3)
    fail_here()
time.sleep(120)
