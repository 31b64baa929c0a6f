"""Telemetry overhead: training steps/s with the resource sampler on vs off, same run.

    python benchmarks/bench_telemetry.py [--pairs 60] [--steps 100] [--interval 0.1]

A worker process runs a small CPU training loop (an MLP, torch, one thread) in blocks
of ``--steps`` steps. The parent stands in for ``accel launch``: its ResourceSampler
thread runs all along and samples the worker during "on" blocks only (its pid source
is empty during "off" blocks). Blocks come in adjacent pairs, off/on then on/off, so
neither mode always goes first and slow drifts of a shared machine cancel out; the
result is the median of the per-pair ratios steps/s(on) / steps/s(off), goal >= 0.98.

``--interval`` defaults to 0.1 s, 100 times more often than the default
``logs.resource_interval`` (10 s), so that every "on" block holds samples.
``--in-process`` also runs the sampler as a thread of the training process itself (a
harsher case than the launcher's: it shares the training interpreter and its GIL).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from accel.telemetry import ResourceSampler

GOAL = 0.98
WORKER = """
import sys, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
def block():
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return steps / (time.perf_counter() - start)
block()  # warm-up
print("ready", flush=True)
for line in sys.stdin:
    print(block(), flush=True)
"""


def modes(pairs: int) -> Iterator[bool]:
    """off,on, on,off, off,on, ...: True = sampler on."""
    for i in range(pairs):
        yield from ((False, True) if i % 2 == 0 else (True, False))


class Toggle:
    """The sampler's pid source: the worker while on, nothing while off."""

    def __init__(self, pid: int) -> None:
        self.pid, self.on = pid, False

    def __call__(self) -> dict[int, int]:
        return {0: self.pid} if self.on else {}


def measure(
    block: Callable[[], float], toggle: Toggle, pairs: int, interval: float, out: Path
) -> dict[bool, list[float]]:
    rates: dict[bool, list[float]] = {False: [], True: []}
    with ResourceSampler(toggle, out, interval, gpus=None):
        for on in modes(pairs):
            toggle.on = on
            rates[on].append(block())
    return rates


def in_worker(pairs: int, steps: int, interval: float, out: Path) -> dict[bool, list[float]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(steps)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"

    def block() -> float:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        return float(proc.stdout.readline())

    try:
        return measure(block, Toggle(proc.pid), pairs, interval, out)
    finally:
        proc.stdin.close()
        proc.wait()


def in_process(pairs: int, steps: int, interval: float, out: Path) -> dict[bool, list[float]]:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def block() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return steps / (time.perf_counter() - start)

    block()
    return measure(block, Toggle(os.getpid()), pairs, interval, out)


def report(title: str, rates: dict[bool, list[float]], out: Path) -> bool:
    ratios = [on / off for on, off in zip(rates[True], rates[False], strict=True)]
    ratio = statistics.median(ratios)
    samples = len(out.read_text().splitlines()) if out.exists() else 0
    met = ratio >= GOAL
    print(f"\n{title}  ({len(ratios)} pairs of blocks, {samples} samples written)")
    print(f"  sampler off  {statistics.median(rates[False]):8.1f} steps/s (median)")
    print(f"  sampler on   {statistics.median(rates[True]):8.1f} steps/s (median)")
    verdict = "ok" if met else "MISSED"
    print(f"  ratio on/off {ratio:8.3f} (median of pairs)   goal >= {GOAL:.2f}  {verdict}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--in-process", action="store_true")
    args = parser.parse_args()
    cases: list[tuple[str, Callable[..., dict[bool, list[float]]]]] = [
        ("sampler in the launcher, as accel launch runs it", in_worker)
    ]
    if args.in_process:
        cases.append(("sampler inside the training process (worst case)", in_process))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for i, (title, case) in enumerate(cases):
            out = Path(tmp) / f"resources-{i}.jsonl"
            rates = case(args.pairs, args.steps, args.interval, out)
            ok &= report(f"{title}, interval {args.interval:g}s", rates, out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
