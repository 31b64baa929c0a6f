"""`accel launch -n 2` against `torchrun --nproc-per-node 2` of the same empty gloo script.

    python benchmarks/bench_launch.py [--rounds 9]

Each round runs every command once, in turn, in a scratch project: torchrun, accel
launch (exec: every worker imports torch), accel launch with ``--preload`` (workers
forked from a template that imported torch), and the physical limits of this machine in
the same run: a bare ``python -c pass`` and ``python -c "import torch"``. The script sets
up and tears down a gloo process group, so the time is the launcher's start-up,
rendezvous, worker start-up and shutdown. Goals: exec <= 1.00, preload <= 0.75 of
torchrun's median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import alternate_samples, p90

EMPTY = """\
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""
BASELINE = "torchrun --nproc-per-node 2"
GOALS = {"accel launch -n 2": 1.00, "accel launch -n 2 --preload": 0.75}


def commands(project: Path) -> dict[str, list[str]]:
    bindir = Path(sys.executable).parent
    accel = shutil.which("accel") or str(bindir / "accel")
    torchrun = shutil.which("torchrun") or str(bindir / "torchrun")
    script = str(project / "empty.py")
    return {
        BASELINE: [torchrun, "--nproc-per-node", "2", script],
        "accel launch -n 2": [accel, "launch", "-n", "2", script],
        "accel launch -n 2 --preload": [accel, "launch", "-n", "2", "--preload", script],
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    }


def report(samples: dict[str, list[float]]) -> bool:
    base = statistics.median(samples[BASELINE])
    print(f"\nLaunch  (baseline: {BASELINE} = {base * 1000:.0f} ms, median)")
    ok = True
    for name, values in samples.items():
        median = statistics.median(values)
        goal = GOALS.get(name)
        met = goal is None or median / base <= goal
        ok &= met
        verdict = "" if goal is None else f"goal <= {goal:.2f}  {'ok' if met else 'MISSED'}"
        print(
            f"  {name:<30} median {median * 1000:6.0f} ms  p90 {p90(values) * 1000:6.0f} ms  "
            f"ratio {median / base:5.2f}  {verdict}"
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        (project / "empty.py").write_text(EMPTY)
        env = {**os.environ, "HOME": folder, "ACCEL_WORKSPACE": f"{folder}/.accelerate"}
        samples = alternate_samples(commands(project), args.rounds, cwd=folder, env=env)
    return 0 if report(samples) else 1


if __name__ == "__main__":
    sys.exit(main())
