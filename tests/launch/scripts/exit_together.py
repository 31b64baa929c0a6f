"""Both ranks exit non-zero by themselves: rank 0 first, rank 1 before accel stops it, but
still in its exit handlers when accel's SIGTERM comes (the stop that rank 0's end began).

argv: OUT HOW, HOW one of text (``sys.exit`` with a message of two lines that quotes
$DEMO_API_TOKEN) or code (``raise SystemExit(7)``). Each step waits on the other rank's
file, per attempt: rank 0 exits, then rank 1 exits, then rank 0's process ends.
"""

import atexit
import os
import sys
import time

out, how = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")


def mark(name):
    open(os.path.join(out, f"{attempt}-{name}"), "w").close()


def wait_for(name):
    while not os.path.exists(os.path.join(out, f"{attempt}-{name}")):
        time.sleep(0.02)


def then_sleep():
    mark("exited-1")  # after the bootstrap noted the exit: the script has ended
    time.sleep(600)  # ended by accel's SIGTERM, once rank 0's process is gone


if rank == 0:
    atexit.register(wait_for, "exited-1")
    atexit.register(mark, "exited-0")  # runs first (exit handlers are LIFO)
else:
    wait_for("exited-0")
    atexit.register(then_sleep)
if how == "text":
    sys.exit(f"fatal: config missing\n  (token {os.environ['DEMO_API_TOKEN']})")
raise SystemExit(7)
