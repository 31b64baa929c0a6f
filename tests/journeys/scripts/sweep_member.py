"""A plain torch script of a sweep: never touches accel's checkpoints.

Every rank joins the process group and all-reduces; rank 0 then writes
``<DIR>/started-<ACCEL_RUN_ID>`` and waits (at most a minute) until ``<N>`` runs have
written theirs, so the runs of the test provably overlap. Usage: DIR N.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

folder, count = Path(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
assert int(total.item()) == dist.get_world_size()
if dist.get_rank() == 0:
    (folder / f"started-{os.environ['ACCEL_RUN_ID']}").write_text("")
    deadline = time.monotonic() + 60
    while len(list(folder.glob("started-*"))) < count and time.monotonic() < deadline:
        time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
