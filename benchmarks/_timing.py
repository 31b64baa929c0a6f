"""Shared helpers for the benchmarks: alternate commands, report medians and ratios."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def accel_exe() -> str:
    """The ``accel`` executable of this interpreter's environment."""
    return shutil.which("accel") or str(Path(sys.executable).parent / "accel")


@contextlib.contextmanager
def scratch_project() -> Iterator[tuple[str, dict[str, str]]]:
    """A temporary project with a default config: (its folder, the env to run accel in)."""
    with tempfile.TemporaryDirectory() as project:
        env = {**os.environ, "HOME": project, "ACCEL_WORKSPACE": f"{project}/.accelerate"}
        subprocess.run(
            [accel_exe(), "config", "--default"],
            cwd=project,
            env=env,
            check=True,
            capture_output=True,
        )
        yield project, env


def time_command(
    argv: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None
) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def alternate_samples(
    commands: dict[str, Sequence[str]], rounds: int, **kwargs: object
) -> dict[str, list[float]]:
    """Run every command once per round, in turn; every command's times in seconds."""
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            samples[name].append(time_command(argv, **kwargs))  # type: ignore[arg-type]
    return samples


def alternate(
    commands: dict[str, Sequence[str]], rounds: int, **kwargs: object
) -> dict[str, float]:
    """Run every command once per round, in turn, and return each one's median seconds."""
    samples = alternate_samples(commands, rounds, **kwargs)
    return {name: statistics.median(values) for name, values in samples.items()}


def memcpy_times(tensors: Sequence[Any], count: int) -> list[float]:
    """The bare copy of the tensors' bytes into buffers already touched, on every core
    (8 MiB ``numpy.copyto`` pieces): the limit of a snapshot of CPU tensors."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import torch

    chunk = 8 << 20
    sources = [t.reshape(-1).view(torch.uint8).numpy() for t in tensors]
    targets = [np.empty_like(src) for src in sources]
    jobs = [
        (dst[at : at + chunk], src[at : at + chunk])
        for dst, src in zip(targets, sources, strict=True)
        for at in range(0, len(src), chunk)
    ]
    times = []
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for i in range(count + 1):
            start = time.perf_counter()
            list(pool.map(lambda job: np.copyto(job[0], job[1]), jobs))
            if i:  # the first touches the buffers
                times.append(time.perf_counter() - start)
    return times


def p90(values: Sequence[float]) -> float:
    """The 90th percentile (nearest rank): with 9 rounds, the second slowest."""
    ordered = sorted(values)
    return ordered[max(0, -(-9 * len(ordered) // 10) - 1)]


def report(
    title: str,
    medians: dict[str, float],
    baseline: str,
    goal: float,
    *,
    lower_is_better: bool = True,
) -> bool:
    print(f"\n{title}  (baseline: {baseline} = {medians[baseline] * 1000:.0f} ms)")
    ok = True
    for name, value in medians.items():
        if name == baseline:
            continue
        ratio = value / medians[baseline]
        met = ratio <= goal if lower_is_better else ratio >= goal
        ok &= met
        print(
            f"  {name:<32} {value * 1000:8.0f} ms   ratio {ratio:5.2f}   goal {'<=' if lower_is_better else '>='} {goal:.2f}  {'ok' if met else 'MISSED'}"
        )
    return ok
