"""Concurrent readers of a key never see a false corruption or a false miss while other
processes replace that key and clean the cache (real processes, real files)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.clean import clean
from accel.errors import AccelError

from . import workers

Ctx = multiprocessing.context.BaseContext
SECONDS = 4.0


def _values(source: Path) -> dict[str, list[Any]]:
    return {
        "bytes": [b"a" * 50_000, b"b" * 70_000],
        "tensors": [{"w": torch.zeros(40_000)}, {"w": torch.ones(60_000)}],
        "file": [source / "one.idx", source / "two.idx"],
    }


def _writer(ws_path: str, kind: str, source: str, stop: Any) -> None:
    cache = Workspace(ws_path).cache
    values = _values(Path(source))[kind]
    n = 0
    while not stop.is_set():
        cache.put(f"race/{kind}", values[n % 2])
        n += 1


def _cleaner(ws_path: str, stop: Any) -> None:
    """Puts (two hours in the past) and deletes keys beside the raced one, and runs
    ``clean`` over the whole cache, which removes those old keys and nothing else."""
    ws = Workspace(ws_path)
    real = time.time
    n = 0
    while not stop.is_set():
        time.time = lambda: real() - 7200  # type: ignore[assignment]
        ws.cache.put(f"race/other-{n % 5}", b"o" * 1000)
        time.time = real  # type: ignore[assignment]
        ws.cache.delete(f"race/other-{(n + 2) % 5}")
        clean(ws, older_than="1h", only=["cache"])
        n += 1


def _reader(ws_path: str, kind: str, source: str, stop: Any, queue: Any) -> None:
    cache = Workspace(ws_path).cache
    key = f"race/{kind}"
    good = _values(Path(source))[kind]
    reads = 0
    problems: list[str] = []
    while not stop.is_set():
        try:
            got = cache.path(key) if kind == "file" else cache.get(key, "MISSING")
        except AccelError as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
            continue
        reads += 1
        if got in (None, "MISSING"):
            problems.append("a miss")
        elif kind == "file" and got.read_bytes() not in [p.read_bytes() for p in good]:
            problems.append("a wrong file")
        elif kind == "tensors" and not any(torch.equal(got["w"], v["w"]) for v in good):
            problems.append("a wrong tensor")
        elif kind == "bytes" and got not in good:
            problems.append("wrong bytes")
    queue.put((reads, problems[:5], len(problems)))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["bytes", "tensors", "file"])
def test_readers_never_see_a_false_error_or_miss_while_the_key_is_replaced(
    ws: Workspace, fork: Ctx, tmp_path: Path, kind: str
) -> None:
    source = tmp_path / "sources"
    source.mkdir()
    (source / "one.idx").write_bytes(b"1" * 30_000)
    (source / "two.idx").write_bytes(b"2" * 45_000)
    ws.cache.put(f"race/{kind}", _values(source)[kind][0])
    stop, queue = fork.Event(), fork.Queue()
    procs = [
        workers.process(fork, _writer, str(ws.path), kind, str(source), stop),
        workers.process(fork, _cleaner, str(ws.path), stop),
    ] + [
        workers.process(fork, _reader, str(ws.path), kind, str(source), stop, queue)
        for _ in range(3)
    ]
    for proc in procs:
        proc.start()
    time.sleep(SECONDS)
    stop.set()
    outcomes = [queue.get(timeout=60) for _ in range(3)]
    codes = [workers.finish(p, timeout=60) for p in procs]
    assert codes == [0] * len(procs)
    assert all(reads > 0 for reads, _, _ in outcomes)
    assert [(problems, count) for _, problems, count in outcomes] == [([], 0)] * 3
