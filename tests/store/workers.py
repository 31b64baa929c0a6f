"""Code the store tests run in forked child processes (real processes, real signals).

A child forked after the test process has started torch's OpenMP threads hangs on its
first parallel op (GNU OpenMP is not fork-safe): every child runs single-threaded,
so torch never enters a parallel region there.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable
from typing import Any

import torch

from accel import Workspace
from accel.errors import AccelError
from accel.store.lease import SeriesLease


def process(ctx: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """An unstarted child running ``fn(*args)``, safe to fork after torch ran (above)."""
    return ctx.Process(target=_call, args=(fn, args))


def finish(child: Any, timeout: float = 30) -> int | None:
    """Wait for ``child``; kill it if it is still running. Its exit code, None if killed."""
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return int(child.exitcode)


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    torch.set_num_threads(1)
    fn(*args)


def state(value: float, n: int = 16) -> dict[str, Any]:
    return {"model": {"w": torch.full((n,), value)}, "step": int(value), "note": "x"}


# -- store ------------------------------------------------------------------------------


def hold_store_lock(ws_path: str, ready: Any, hold: float) -> None:
    def slow(value: Any) -> Any:
        ready.set()
        time.sleep(hold)
        return "from child"

    Workspace(ws_path).store.update("k", slow)


def increment(ws_path: str, times: int) -> None:
    store = Workspace(ws_path).store
    for _ in range(times):
        store.update("counter", lambda v: v + 1, default=0)


def update_forever(ws_path: str) -> None:
    store = Workspace(ws_path).store
    while True:
        store.update("counter", lambda v: v + 1, default=0)
        store.set("blob", ["x" * 1000] * 50)


# -- checkpoints ------------------------------------------------------------------------


def hold_lease(ws_path: str, run_id: str | None, ready: Any) -> None:
    SeriesLease(Workspace(ws_path).layout, "default", run_id=run_id).acquire()
    ready.set()
    time.sleep(60)


def save_in_child(ws_path: str, step: int, env: dict[str, str]) -> None:
    os.environ.update(env)
    Workspace(ws_path).checkpoints.save(state(step), step)


def save_forever(ws_path: str, first: int) -> None:
    ckpts = Workspace(ws_path).checkpoints
    tensors = {"a": torch.arange(200_000, dtype=torch.float32), "b": torch.ones(50_000)}
    step = first
    while True:
        tensors["a"][0] = step
        ckpts.save({"model": tensors, "step": step}, step)
        step += 1


def save_under_fsize_limit(ws_path: str, limit: int, queue: Any) -> None:
    ckpts = Workspace(ws_path).checkpoints
    ckpts.save({"w": torch.zeros(1000)}, 1)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    outcome = []
    for async_save in (False, True):
        try:
            ckpts.save({"w": torch.zeros(limit)}, 2, async_save=async_save)
            ckpts.wait()
            outcome.append("saved")
        except AccelError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")
    queue.put(outcome)


# -- kills at named points (accel._faults) ----------------------------------------------


def kill_at(index: int | None, seen: list[str]) -> Any:
    """A hook that records every point passed and SIGKILLs this process at point
    number ``index`` (None: never). Reaper threads pass points too: hence the lock."""
    import threading

    lock = threading.Lock()

    def hook(name: str) -> None:
        with lock:
            seen.append(name)
            if index is not None and len(seen) - 1 == index:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def at_points(index: int | None, queue: Any, action: Any, *args: Any) -> None:
    """Run ``action(*args)`` with :func:`kill_at` installed; report the points passed."""
    from accel import _faults

    seen: list[str] = []
    _faults.set_hook(kill_at(index, seen))
    action(*args)
    _faults.set_hook(None)
    queue.put(seen)


def resave(ws_path: str, step: int, value: float) -> None:
    ckpts = Workspace(ws_path).checkpoints
    ckpts.save(state(value), step)
    ckpts.wait()


def resave_forever(ws_path: str, step: int, first: int) -> None:
    ckpts = Workspace(ws_path).checkpoints
    value = first
    while True:
        ckpts.save(state(value, n=20_000), step)
        value += 1


def put_value(ws_path: str, key: str, value: Any) -> None:
    Workspace(ws_path).cache.put(key, value)


def delete_key(ws_path: str, key: str) -> None:
    Workspace(ws_path).cache.delete(key)


# -- the memory tier ---------------------------------------------------------------------


def persist_newest(ws_path: str, tier: str, world_size: int) -> None:
    """What the launcher does when a worker fails: commit the newest whole snapshot."""
    from pathlib import Path

    from accel.store.persister import Persister

    persister = Persister(Path(tier), Workspace(ws_path).checkpoints.commit_files, world_size, None)
    assert persister.persist_newest() is not None
