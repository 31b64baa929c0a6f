"""Start-up of the commands that must not import torch, against `python -c "import torch"`.

    python benchmarks/bench_startup.py [--rounds 15]

Each round runs every command once, alternating, in a scratch project with a workspace;
the medians are compared with a bare torch import measured in the same run (goal <= 0.20).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import accel_exe, alternate, report, scratch_project


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    accel = accel_exe()
    with scratch_project() as (project, env):
        commands = {
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "accel --help": [accel, "--help"],
            "accel config show": [accel, "config", "show"],
            "accel status": [accel, "status"],
            "accel clean --dry-run": [accel, "clean", "--older-than", "7d", "--dry-run"],
        }
        medians = alternate(commands, args.rounds, cwd=project, env=env)
    ok = report("CLI start-up", medians, "python -c 'import torch'", 0.20)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
