"""Fails on the first attempt (rank 1), succeeds on the restart."""

import os
import sys

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"attempt {attempt} rank {os.environ['RANK']}")
if attempt == 0 and os.environ["RANK"] == "1":
    sys.exit(3)
