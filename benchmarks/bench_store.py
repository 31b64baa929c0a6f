"""Store ``update`` throughput with 4 processes against diskcache's ``incr``, one run.

    python benchmarks/bench_store.py [--procs 4] [--updates 250] [--rounds 3] [--dir PATH]
                                     [--keys N]

Each round starts ``--procs`` processes that each increment one shared counter
``--updates`` times, first through ``ws.store.update`` and then through
``diskcache.Cache.incr``, and checks that no update was lost.

Durability, side by side:
- accel: flock, read, write a temp file, fsync it, ``os.replace``, fsync the folder;
  every update survives power loss once ``update`` returns.
- diskcache: SQLite in WAL mode with ``synchronous=FULL`` (``sqlite_synchronous=2``),
  so the WAL is fsynced at every commit: the same promise. (diskcache's default,
  ``NORMAL``, may lose the last commits on power loss; it is printed too, for scale.)

Prints updates per second and the ratio accel / diskcache(FULL). There is no fixed
goal: the issue asks for the ratio to be reported.

``--keys N``: both stores hold N other keys first (a small dict each, as a script that
records a best per experiment), the state a long project accumulates: accel's file is
read, checked and written whole at every update, diskcache's row is one of N.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _accel_worker(path: str, updates: int, start: Any) -> None:
    from accel import Workspace

    store = Workspace(path).store
    start.wait()
    for _ in range(updates):
        store.update("counter", lambda v: v + 1, default=0)


def _diskcache_worker(path: str, updates: int, start: Any, synchronous: int) -> None:
    import diskcache

    cache = diskcache.Cache(path, sqlite_synchronous=synchronous)
    start.wait()
    for _ in range(updates):
        cache.incr("counter")
    cache.close()


def _race(target: Any, args: tuple[Any, ...], procs: int) -> float:
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    workers = [ctx.Process(target=target, args=(*args[:2], start, *args[2:])) for _ in range(procs)]
    for w in workers:
        w.start()
    time.sleep(0.2)  # let every worker open its store before the clock starts
    began = time.perf_counter()
    start.set()
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise SystemExit(f"a worker failed with exit code {w.exitcode}")
    return time.perf_counter() - began


def _others(n: int) -> dict[str, Any]:
    return {
        f"run/{i:06d}/best": {"loss": 0.1 + i * 1e-6, "step": i * 100, "tag": "best"}
        for i in range(n)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--updates", type=int, default=250)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keys", type=int, default=0)
    args = parser.parse_args()

    import diskcache

    from accel import Workspace
    from accel._fs import atomic_write
    from accel.store.kv import encode_state

    total = args.procs * args.updates
    times: dict[str, list[float]] = {"accel": [], "diskcache FULL": [], "diskcache NORMAL": []}
    for _ in range(args.rounds):
        scratch = Path(tempfile.mkdtemp(prefix="accel-bench-store-", dir=args.dir))
        try:
            ws = Workspace(scratch / ".accelerate").ensure()
            if args.keys:  # written as the store writes it, in one go
                atomic_write(ws.layout.state_file, encode_state(_others(args.keys)))
            spent = _race(_accel_worker, (str(ws.path), args.updates), args.procs)
            assert ws.store.get("counter") == total, "lost update"
            times["accel"].append(spent)
            for name, sync in (("diskcache FULL", 2), ("diskcache NORMAL", 1)):
                folder = scratch / name.replace(" ", "-")
                if args.keys:
                    with diskcache.Cache(str(folder)) as cache, cache.transact():
                        for key, value in _others(args.keys).items():
                            cache.set(key, value)
                spent = _race(_diskcache_worker, (str(folder), args.updates, sync), args.procs)
                with diskcache.Cache(str(folder)) as cache:
                    assert cache.get("counter") == total, "lost update"
                times[name].append(spent)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    rate = {name: total / statistics.median(values) for name, values in times.items()}
    held = f", {args.keys} other keys held" if args.keys else ""
    print(f"{args.procs} processes x {args.updates} updates, {args.rounds} rounds{held} (medians)")
    for name, value in rate.items():
        print(f"  {name:<18} {value:8.0f} updates/s")
    print(f"accel / diskcache FULL   {rate['accel'] / rate['diskcache FULL']:.2f}")
    print(f"accel / diskcache NORMAL {rate['accel'] / rate['diskcache NORMAL']:.2f}")
    if args.keys:
        _one_process(args.keys, args.dir)
    return 0


def _one_process(keys: int, parent: str | None) -> None:
    """One script's ``get`` and ``set`` beside the store's holding ``keys``, medians of
    10, and a bare ``json.loads`` of the same bytes (the floor of reading it)."""
    import json

    from accel import Workspace
    from accel._fs import atomic_write
    from accel.store.kv import encode_state

    scratch = Path(tempfile.mkdtemp(prefix="accel-bench-store-", dir=parent))
    try:
        ws = Workspace(scratch / ".accelerate").ensure()
        atomic_write(ws.layout.state_file, encode_state(_others(keys)))
        body = ws.layout.state_file.read_bytes().partition(b"\n")[2]
        store = ws.store
        for name, call in (
            ("get", lambda i: store.get("step")),
            ("set", lambda i: store.set("step", i)),
            ("json.loads", lambda i: json.loads(body)),
        ):
            took = []
            for i in range(10):
                began = time.perf_counter()
                call(i)
                took.append(time.perf_counter() - began)
            print(f"  one {name:<12} {statistics.median(took) * 1000:8.1f} ms ({keys} keys)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
