"""`accel logs` of a finished run against a bare Python loop writing the same bytes.

    python benchmarks/bench_logs.py [--lines 3000000] [--ranks 2] [--rounds 5] [--tty]

Builds a scratch workspace with one finished run whose rank logs hold N training-style
lines each (``step 123  epoch 0  loss 0.12345``, one stderr warning in 1,000), prints
them once to learn the output, then runs alternately, each in a fresh process with its
stdout in a file: `accel logs`, and `python` writing that output line by line
(``for line in file: sys.stdout.write(line)``). Prints median and p90 ratios
(goal <= 2.00). ``--tty`` runs both on a pseudo-terminal (``script -qc``) instead.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import accel_exe, p90, scratch_project

RUN_ID = "20261129-100000-aaaaaa"
GOAL = 2.0
BARE = (
    "import sys\n"
    "write = sys.stdout.write\n"
    "for line in open(sys.argv[1], encoding='utf-8', errors='replace'):\n"
    "    write(line)\n"
)


def build(ws: Path, lines: int, ranks: int) -> None:
    from accel import Workspace, runs

    workspace = Workspace(ws, env={}).ensure()
    folder = runs.run_dir(workspace.layout, RUN_ID)
    folder.mkdir(parents=True)
    record = {
        "id": RUN_ID,
        "name": "bench",
        "status": "succeeded",
        "exit_code": 0,
        "world_size": ranks,
        "started_at": "2026-11-29T10:00:00+00:00",
        "ended_at": "2026-11-29T11:00:00+00:00",
    }
    (folder / "run.json").write_text(json.dumps(record))
    for rank in range(ranks):
        with open(folder / f"rank-{rank}.log", "w") as fh:
            for start in range(0, lines, 10_000):
                fh.write("".join(_line(i, rank) for i in range(start, min(start + 10_000, lines))))


def _line(i: int, rank: int) -> str:
    if i % 1000 == 999:
        return f"[stderr] warning: step {i} took longer than the last\n"
    return f"step {i:7d}  epoch {i // 500}  loss 0.{(i * 7919 + rank) % 100_000:05d}\n"


def timed(argv: list[str], cwd: str, env: dict[str, str], out: Path, tty: bool) -> float:
    if tty:  # a pseudo-terminal: what a person at a terminal waits for
        argv = ["script", "-qc", shlex.join(argv), "/dev/null"]
    start = time.perf_counter()
    with open(out, "wb") as fh:
        subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=fh, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=3_000_000, help="lines per rank log")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tty", action="store_true", help="on a pseudo-terminal (script)")
    args = parser.parse_args()
    if args.tty and not shutil.which("script"):
        print("--tty needs util-linux `script`", file=sys.stderr)
        return 2
    with scratch_project() as (project, env):
        build(Path(project) / ".accelerate", args.lines, args.ranks)
        shown = Path(project) / "shown.txt"
        logs = [accel_exe(), "logs"]
        timed(logs, project, env, shown, tty=False)  # the bytes the bare loop writes
        commands = {
            "python write loop": [sys.executable, "-c", BARE, str(shown)],
            "accel logs": logs,
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                out = Path(project) / "out.txt"
                samples[name].append(timed(argv, project, env, out, args.tty))
        size = shown.stat().st_size
    base = samples["python write loop"]
    where = "on a pseudo-terminal" if args.tty else "piped to a file"
    print(f"\naccel logs of {args.ranks} x {args.lines} lines ({size / 1e6:.0f} MB), {where}")
    ok = True
    for name, values in samples.items():
        median, slow = statistics.median(values), p90(values)
        ratio = median / statistics.median(base)
        line = f"  {name:<20} median {median * 1000:7.0f} ms  p90 {slow * 1000:7.0f} ms"
        if name != "python write loop":
            met = ratio <= GOAL
            ok &= met
            line += f"   ratio {ratio:4.2f} (p90 {slow / p90(base):4.2f})  goal <= {GOAL:.2f}"
            line += "  ok" if met else "  MISSED"
        print(line + f"  {size / median / 1e6:5.0f} MB/s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
