"""`accel launch -n 2` against `torchrun --nproc-per-node 2` of the same empty gloo script.

    python benchmarks/bench_launch.py [--rounds 7]

Each round runs both once, alternating, in a scratch project; the medians are compared
(goal <= 1.00, stretch <= 0.70). The script sets up and tears down a gloo process group,
so the time is the launcher's start-up, rendezvous, worker start-up and shutdown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import alternate, report

EMPTY = """\
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    bindir = Path(sys.executable).parent
    accel = shutil.which("accel") or str(bindir / "accel")
    torchrun = shutil.which("torchrun") or str(bindir / "torchrun")
    with tempfile.TemporaryDirectory() as project:
        script = Path(project) / "empty.py"
        script.write_text(EMPTY)
        env = {**os.environ, "HOME": project, "ACCEL_WORKSPACE": f"{project}/.accelerate"}
        commands = {
            "torchrun --nproc-per-node 2": [torchrun, "--nproc-per-node", "2", str(script)],
            "accel launch -n 2": [accel, "launch", "-n", "2", str(script)],
        }
        medians = alternate(commands, args.rounds, cwd=project, env=env)
    ok = report("Launch", medians, "torchrun --nproc-per-node 2", 1.00)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
