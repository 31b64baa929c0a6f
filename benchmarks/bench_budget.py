"""The size budget's no-op cost: ``accel.clean.budget.check`` under budget vs a bare walk.

    python benchmarks/bench_budget.py [--entries 20000] [--rounds 9]

A scratch workspace gets ``--entries`` cache entries (a payload + meta.json each), 50
finished runs and a checkpoint. ``check`` runs with a budget far above the workspace
size (the common case after every launch: nothing to do) and with no budget at all,
alternating with a bare ``os.walk`` + ``lstat`` of the same tree; medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build(root: Path, entries: int) -> object:
    from accel import Workspace

    ws = Workspace(root / ".accelerate", env={}).ensure()
    base = ws.cache_dir / "entries"
    for i in range(entries):
        entry = base / f"ns{i % 100:02d}" / f"key{i}.entry"
        entry.mkdir(parents=True)
        (entry / "payload.bin").write_bytes(b"x" * 64)
        meta = {
            "format": 1,
            "key": f"ns{i % 100:02d}/key{i}",
            "kind": "bytes",
            "payload": "payload.bin",
            "size": 64,
            "checksum": "xxh3_64:0",
            "created": 1.0,
            "last_used": 1.0,
        }
        (entry / "meta.json").write_text(json.dumps(meta))
    for i in range(50):
        run = ws.runs_dir / f"20261129-1200{i:02d}-abcdef"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"id": run.name, "status": "succeeded"}))
        (run / "rank-0.log").write_text("x\n" * 100)
    return ws


def bare_walk(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(folder, name)).st_size
    return total


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> int:
    from accel.clean.budget import UNDER, check

    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        ws = build(Path(scratch), args.entries)
        assert check(ws, max_size=10**12).action == UNDER  # type: ignore[arg-type]
        samples: dict[str, list[float]] = {"walk": [], "under": [], "off": []}
        for _ in range(args.rounds):
            samples["walk"].append(timed(lambda: bare_walk(ws.path)))  # type: ignore[attr-defined]
            samples["under"].append(timed(lambda: check(ws, max_size=10**12)))  # type: ignore[arg-type]
            samples["off"].append(timed(lambda: check(ws)))  # type: ignore[arg-type]
    walk, under, off = (statistics.median(samples[k]) for k in ("walk", "under", "off"))
    files = args.entries * 2 + 100
    print(f"\nsize budget check over {files} files, {args.rounds} rounds (medians)")
    print(f"  bare os.walk + lstat           {walk * 1000:8.1f} ms")
    print(f"  check(), under budget (no-op)  {under * 1000:8.1f} ms   ratio {under / walk:.2f}")
    print(f"  check(), no cache.max_size     {off * 1000:8.3f} ms")
    return 0


if __name__ == "__main__":
    os.environ.pop("ACCEL_WORKSPACE", None)
    sys.exit(main())
