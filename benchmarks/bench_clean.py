"""`accel clean --older-than 7d --dry-run` against a bare `os.walk` + `stat` of the same tree.

    python benchmarks/bench_clean.py [--entries 20000] [--rounds 7]
    python benchmarks/bench_clean.py --env [--rounds 7]

Builds a scratch workspace of N cache entries (payload + meta.json, half of them last
used 30 days ago), then runs both commands alternately, each in a fresh process, and
compares the medians (goal <= 1.50).

``--env`` instead measures `accel env --json` (no devices requested) against a bare
`python -c "import torch"`: it should cost about the import and nothing heavy on top
(goal <= 1.25).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import accel_exe, alternate, report, scratch_project

STARTUP = "start-up"
WALK = (
    "import os, sys\n"
    "n = 0\n"
    "for root, dirs, files in os.walk(sys.argv[1]):\n"
    "    for name in files:\n"
    "        os.stat(os.path.join(root, name))\n"
    "        n += 1\n"
)


def build(ws: Path, entries: int) -> None:
    from accel import Workspace

    Workspace(ws, env={}).ensure()  # clean refuses a folder accel did not make
    now = time.time()
    folder = ws / "cache" / "entries"
    folder.mkdir(parents=True)
    for i in range(entries):
        entry = folder / f"bench-{i:06d}.entry"
        entry.mkdir()
        (entry / "value.bin").write_bytes(b"x" * 64)
        when = now - (30 * 86400 if i % 2 else 3600)
        meta = {
            "format": 1,
            "key": f"bench-{i:06d}",
            "kind": "bytes",
            "payload": "value.bin",
            "size": 64,
            "checksum": "xxh3_64:0",
            "created": when,
            "last_used": when,
            "run_id": None,
        }
        (entry / "meta.json").write_text(json.dumps(meta))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--env", action="store_true", help="accel env --json vs import torch")
    args = parser.parse_args()
    if args.env:
        return bench_env(args.rounds)
    accel = accel_exe()
    with scratch_project() as (project, env):
        ws = Path(project) / ".accelerate"
        build(ws, args.entries)
        commands = {
            "python os.walk + stat": [sys.executable, "-c", WALK, str(ws)],
            "accel clean --older-than 7d --dry-run": [
                accel,
                "clean",
                "--older-than",
                "7d",
                "--dry-run",
            ],
        }
        empty = str(Path(project) / "empty" / ".accelerate")
        startup = [accel, "--workspace", empty, "clean", "--older-than", "7d", "--dry-run"]
        commands[STARTUP] = startup
        medians = alternate(commands, args.rounds, cwd=project, env=env)
    fixed = medians.pop(STARTUP)
    ok = report(
        f"accel clean planning over {args.entries} cache entries",
        medians,
        "python os.walk + stat",
        1.50,
    )
    print(f"  of which start-up (the same command on an empty workspace): {fixed * 1000:.0f} ms")
    return 0 if ok else 1


def bench_env(rounds: int) -> int:
    accel = accel_exe()
    with scratch_project() as (project, env):
        commands = {
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "accel env --json": [accel, "env", "--json"],
        }
        medians = alternate(commands, rounds, cwd=project, env=env)
    ok = report("accel env --json", medians, "python -c 'import torch'", 1.25)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
