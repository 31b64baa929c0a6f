"""Checkpoint save/load against bare torch.save/torch.load of the same state, one run.

    python benchmarks/bench_checkpoint.py [--mib 256] [--rounds 7] [--dir PATH]

Alternates, round by round, in one process on one filesystem:

- save:  ``torch.save(state, f)`` + fsync of the file  vs  ``ws.checkpoints.save``
  (temp folder, xxh3 checksums, fsync of every file, manifest, rename, folder fsyncs,
  retention). Throughput ratio = bare time / accel time; goal >= 0.90.
- load:  ``torch.load(f, weights_only=True)``  vs  ``ws.checkpoints.load`` (sizes and
  checksums verified). Goal >= 0.90.
- async: time ``save(async_save=True)`` blocks the caller / sync save time; goal <= 0.15.
  The first round warms the snapshot buffers and is not counted (a training loop
  saves many times; every later save reuses them).

Prints medians and ratios; exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def _bare_save(state: Any, path: Path) -> None:
    import torch

    torch.save(state, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()

    import torch

    from accel import Workspace

    scratch = Path(tempfile.mkdtemp(prefix="accel-bench-ckpt-", dir=args.dir))
    try:
        os.environ["ACCEL_CHECKPOINTS_KEEP_LAST"] = "2"
        ws = Workspace(scratch / ".accelerate").ensure()
        ckpts = ws.checkpoints
        tensors = max(1, args.mib // 16)
        state = {"model": {f"layer{i}.weight": torch.randn(4 * 1024**2) for i in range(tensors)}}
        bare_file = scratch / "bare.pt"
        samples: dict[str, list[float]] = {k: [] for k in ("bare", "accel", "bload", "aload")}
        blocked: list[float] = []
        step = 0
        for round_ in range(args.rounds + 1):
            step += 1
            samples["bare"].append(_timed(_bare_save, state, bare_file))
            samples["accel"].append(_timed(ckpts.save, state, step, async_save=False))
            samples["bload"].append(_timed(torch.load, bare_file, weights_only=True))
            samples["aload"].append(_timed(ckpts.load, step))
            step += 1
            wait = _timed(ckpts.save, state, step, async_save=True)
            ckpts.wait()
            if round_ > 0:
                blocked.append(wait)
        med = {k: statistics.median(v[1:]) for k, v in samples.items()}  # round 0: warm-up
        async_blocked = statistics.median(blocked)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    results = [
        ("save throughput vs torch.save+fsync", med["bare"] / med["accel"], 0.90, True),
        ("load throughput vs torch.load", med["bload"] / med["aload"], 0.90, True),
        ("async save: blocked / sync save", async_blocked / med["accel"], 0.15, False),
    ]
    print(f"state {tensors * 16} MiB, {args.rounds} rounds (medians)")
    print(f"  torch.save + fsync        {med['bare'] * 1000:8.0f} ms")
    print(f"  checkpoints.save          {med['accel'] * 1000:8.0f} ms")
    print(f"  torch.load                {med['bload'] * 1000:8.0f} ms")
    print(f"  checkpoints.load          {med['aload'] * 1000:8.0f} ms")
    print(f"  save(async_save=True)     {async_blocked * 1000:8.0f} ms blocked")
    ok = True
    for name, ratio, goal, higher in results:
        met = ratio >= goal if higher else ratio <= goal
        ok &= met
        sign = ">=" if higher else "<="
        print(f"{name:<40} {ratio:5.2f}  goal {sign} {goal:.2f}  {'ok' if met else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
