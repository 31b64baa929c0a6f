"""Rank 1 leaves its TORCHELASTIC_ERROR_FILE cut short and exits 1, as a worker stopped
while it wrote the file does (torch's ``@record`` writes it in place); rank 0 waits to be
stopped. ``torn_error_file.py``."""

import os
import time

if os.environ["RANK"] == "1":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as fh:
        fh.write('{"message": {"message": "RuntimeErr')
    os._exit(1)
time.sleep(60)
