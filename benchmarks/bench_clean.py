"""`accel clean --older-than 7d --dry-run` against a bare `os.walk` + `stat` of the same tree.

    python benchmarks/bench_clean.py [--entries 20000] [--rounds 7]

Builds a scratch workspace of N cache entries (payload + meta.json, half of them last
used 30 days ago), then runs both commands alternately, each in a fresh process, and
compares the medians (goal <= 1.50).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import alternate, report

WALK = (
    "import os, sys\n"
    "n = 0\n"
    "for root, dirs, files in os.walk(sys.argv[1]):\n"
    "    for name in files:\n"
    "        os.stat(os.path.join(root, name))\n"
    "        n += 1\n"
)


def build(ws: Path, entries: int) -> None:
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
            "checksum": "0",
            "created": when,
            "last_used": when,
            "run_id": None,
        }
        (entry / "meta.json").write_text(json.dumps(meta))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    accel = shutil.which("accel") or str(Path(sys.executable).parent / "accel")
    with tempfile.TemporaryDirectory() as project:
        ws = Path(project) / ".accelerate"
        env = {**os.environ, "HOME": project, "ACCEL_WORKSPACE": str(ws)}
        subprocess.run(
            [accel, "config", "--default"], cwd=project, env=env, check=True, capture_output=True
        )
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
        medians = alternate(commands, args.rounds, cwd=project, env=env)
    ok = report(
        f"accel clean planning over {args.entries} cache entries",
        medians,
        "python os.walk + stat",
        1.50,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
