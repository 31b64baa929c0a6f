"""Checkpoint collectives that cannot hang: every rank arrives, or every waiter fails.

``save_state`` and ``load_state`` are collectives: every rank must call them.
Hugging Face Accelerate's habit ``if accelerator.is_main_process: accelerator.save_state()``
leaves rank 0 waiting forever in the first collective of the save, with nothing on
screen. So before a checkpoint collective, each rank announces itself on the job's
TCP store (the ``MASTER_ADDR:MASTER_PORT`` store torchrun and ``accel launch`` give
every worker) and waits for the others, ``checkpoints.arrival_timeout`` at most; when
they do not all come, every rank that waited fails with one line naming the ranks that
arrived. The collectives inside are bounded by the checkpoint process group's timeout
(``checkpoints.collective_timeout``), see :mod:`accel.store._dist`.

Each process numbers its checkpoint collectives (1, 2, ...): ranks that call them in
the same order meet on the same number. Without a store to meet on (no ``MASTER_ADDR``
in the environment: a process group made another way) the check is skipped.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from accel.errors import CollectiveMismatch

_local = threading.local()
_lock = threading.Lock()
_state: dict[str, Any] = {"seq": 0, "store": None, "where": None}
POLL_MAX = 0.1  # seconds between looks at the store, at most
POISON = 1 << 40  # taken off the count by a rank that gives up: nobody can pass after


@contextlib.contextmanager
def named(name: str) -> Iterator[None]:
    """Name the collective for the messages (``save_state`` rather than ``Checkpoints.save``)."""
    previous = getattr(_local, "name", None)
    _local.name = previous or name
    try:
        yield
    finally:
        _local.name = previous


def arrive(default_name: str, timeout: float, env: Mapping[str, str] | None = None) -> None:
    """Wait until every rank has reached this checkpoint collective (see the module doc)."""
    group = _group()
    if group is None:
        return
    rank, world = group
    env = os.environ if env is None else env
    store = _store(env)
    if store is None:
        return
    name = getattr(_local, "name", None) or default_name
    with _lock:
        _state["seq"] += 1
        seq = _state["seq"]
    prefix = _prefix(env, seq)
    store.set(f"{prefix}/rank-{rank}", name)
    if int(store.add(f"{prefix}/count", 1)) < world:
        _wait(store, prefix, rank, world, name, timeout)
    _forget(store, _prefix(env, seq - 1), rank)


def _wait(store: Any, prefix: str, rank: int, world: int, name: str, timeout: float) -> None:
    count = f"{prefix}/count"
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        if int(store.add(count, 0)) >= world:
            return
        if store.check([f"{prefix}/gave-up"]):
            arrived = _arrived(store, prefix, world)  # another waiter gave up: the same line
            raise CollectiveMismatch(_message(name, arrived, world, timeout))
        if time.monotonic() >= deadline:
            # Give up atomically: whoever adds after this sees a count below the world.
            if int(store.add(count, -POISON)) + POISON >= world:
                store.add(count, POISON)  # the last rank came at the last moment
                return
            arrived = _arrived(store, prefix, world)
            store.set(f"{prefix}/gave-up", str(rank))
            raise CollectiveMismatch(_message(name, arrived, world, timeout))
        time.sleep(pause)
        pause = min(POLL_MAX, pause * 2)


def _arrived(store: Any, prefix: str, world: int) -> list[int]:
    return [r for r in range(world) if store.check([f"{prefix}/rank-{r}"])]


def _message(name: str, arrived: list[int], world: int, timeout: float) -> str:
    came = ", ".join(str(r) for r in arrived) or "none"
    missing = ", ".join(str(r) for r in range(world) if r not in arrived)
    return (
        f"{name} is a collective: every rank must call it, but only rank(s) {came} of "
        f"{world} arrived within {timeout:g}s (missing: {missing}); call {name} on every rank, not "
        f"only on the main process (`if accelerator.is_main_process: {name}()` is the "
        "Hugging Face habit that does this; accel already writes replicated state from "
        "rank 0 alone). A rank that is only slow: raise checkpoints.arrival_timeout"
    )


def _forget(store: Any, prefix: str, rank: int) -> None:
    """Everyone passed the next meeting, so nobody reads the previous one's keys again."""
    with contextlib.suppress(Exception):
        store.delete_key(f"{prefix}/rank-{rank}")
        if rank == 0:
            store.delete_key(f"{prefix}/count")


def _prefix(env: Mapping[str, str], seq: int) -> str:
    # A store shared across restarts (the agent's) must not mix the attempts' meetings.
    run = env.get("TORCHELASTIC_RUN_ID", "")
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"accel/arrive/{run}/{restart}/{seq}"


def _group() -> tuple[int, int] | None:
    """(rank, world size) of the default process group; None without one (or alone)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    world = int(dist.get_world_size())
    return (int(dist.get_rank()), world) if world > 1 else None


def _store(env: Mapping[str, str]) -> Any:
    """A client of the job's TCP store (one per process), None when there is none."""
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not host or not port or not port.isdigit():
        return None
    with _lock:
        if _state["where"] == (host, port):
            return _state["store"]
        import torch.distributed as dist

        try:
            store = dist.TCPStore(  # type: ignore[attr-defined]
                host, int(port), is_master=False, timeout=timedelta(seconds=60)
            )
        except Exception:  # noqa: BLE001 - no store to meet on: the check is skipped
            store = None
        _state.update(store=store, where=(host, port))
        return store
