"""Say started, then hang in a named function (argv: --quiet-after-start is implied)."""

import os
import time

print(f"rank {os.environ['RANK']} started", flush=True)


def stuck_in_named_function():
    time.sleep(600)


stuck_in_named_function()
