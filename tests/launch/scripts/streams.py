"""Lines on stdout and on stderr, for the two streams to be told apart."""

import os
import sys

rank = os.environ["RANK"]
for i in range(3):
    print(f"out {rank} {i}", flush=True)
    print(f"err {rank} {i}", file=sys.stderr, flush=True)
