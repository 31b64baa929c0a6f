"""``accel sync push`` throughput against a bare fsspec ``put`` of the same files.

    python benchmarks/bench_sync.py [--rounds 5] [--mib 48] [--verify]

A scratch workspace gets three committed checkpoints of ``--mib`` MiB each, 40
finished runs (run.json + rank-0.log) and the config. Each round pushes it to a fresh
``file://`` folder with :func:`accel.sync.push` (inventory, index, streamed copy with
checksum verification, temp name + rename per file, index commits) and copies the same
files with ``fsspec.filesystem("file").put`` (alternating, medians). The ratio is
bare time / sync time: 1.00 means sync moves data as fast as a bare copy. The cost of
a push with nothing to do is reported too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build_workspace(root: Path, mib: int) -> object:
    import torch

    from accel import Workspace

    ws = Workspace(root / ".accelerate", env={}).ensure()
    ws.config_file.write_text("version: 1\n")
    for step in (1, 2, 3):
        ws.checkpoints.save({"w": torch.randn(mib * 1024 * 256)}, step)
    for i in range(40):
        run = ws.runs_dir / f"20261129-1200{i:02d}-abcdef"
        run.mkdir(parents=True)
        (run / "run.json").write_text('{"status": "succeeded"}\n')
        (run / "rank-0.log").write_text("step loss\n" * 200)
    return ws


def sync_files(ws: object) -> list[tuple[Path, str]]:
    from accel.sync._inventory import inventory

    files, _ = inventory(ws, include_cache=False)  # type: ignore[arg-type]
    return [(f.path, f.rel) for f in files]


VERIFY = False


def time_sync(ws: object, dest: Path) -> float:
    from accel.sync import open_remote, push

    start = time.perf_counter()
    result = push(ws, open_remote(dest.as_uri(), {}, {}), verify=VERIFY)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    assert result.ok and result.files > 0
    return elapsed


def time_bare(files: list[tuple[Path, str]], dest: Path) -> float:
    import fsspec

    fs = fsspec.filesystem("file", auto_mkdir=True)
    start = time.perf_counter()
    fs.put([str(p) for p, _ in files], [f"{dest}/{rel}" for _, rel in files])
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=48)
    parser.add_argument("--verify", action="store_true", help="push --verify (re-hash)")
    args = parser.parse_args()
    global VERIFY
    VERIFY = args.verify
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        ws = build_workspace(root / "project", args.mib)
        files = sync_files(ws)
        total = sum(p.stat().st_size for p, _ in files)
        sync_t, bare_t = [], []
        for i in range(args.rounds):
            for name, fn, out in (("sync", time_sync, sync_t), ("bare", time_bare, bare_t)):
                dest = root / f"{name}-{i}"
                out.append(fn(ws if name == "sync" else files, dest))  # type: ignore[operator]
                if i < args.rounds - 1:
                    shutil.rmtree(dest)
        noop = statistics.median(
            time_sync_noop(ws, root / f"sync-{args.rounds - 1}") for _ in range(5)
        )
    s, b = statistics.median(sync_t), statistics.median(bare_t)
    mib = total / 2**20
    print(f"\nsync push of {len(files)} files, {mib:.0f} MiB, file:// target, {args.rounds} rounds")
    print(f"  {'bare fsspec put':<24} {b * 1000:8.0f} ms   {mib / b:7.0f} MiB/s")
    label = "accel sync push --verify" if VERIFY else "accel sync push"
    print(f"  {label:<24} {s * 1000:8.0f} ms   {mib / s:7.0f} MiB/s")
    print(f"  throughput ratio (bare time / sync time): {b / s:.2f}")
    print(f"  push with nothing to do: {noop * 1000:.0f} ms")
    return 0


def time_sync_noop(ws: object, dest: Path) -> float:
    from accel.sync import open_remote, push

    start = time.perf_counter()
    result = push(ws, open_remote(dest.as_uri(), {}, {}))  # type: ignore[arg-type]
    assert result.files == 0
    return time.perf_counter() - start


if __name__ == "__main__":
    os.environ.pop("ACCEL_WORKSPACE", None)
    sys.exit(main())
