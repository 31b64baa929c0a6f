"""A rank that joins the torchrun-style group (env://) and leaves it: the least a test's
two ranks do. ``bare_group.py OUT``: writes OUT/rank-<R>.txt with the world size."""

import os
import sys
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
Path(sys.argv[1], f"rank-{os.environ['RANK']}.txt").write_text(str(dist.get_world_size()))
dist.destroy_process_group()
