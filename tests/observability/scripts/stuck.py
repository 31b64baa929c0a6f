"""Say started (not with argv ``silent``), then hang in a named function."""

import os
import sys
import time

if "silent" not in sys.argv[1:]:  # silent: every rank is quiet since its start, alike
    print(f"rank {os.environ['RANK']} started", flush=True)


def stuck_in_named_function():
    time.sleep(600)


stuck_in_named_function()
