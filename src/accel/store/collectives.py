"""The checkpoint collectives: every rank arrives, every step ends alike on every rank.

``save_state`` and ``load_state`` are collectives: every rank must call them, and this
module is what keeps them from hanging, in three parts.

**Arrival** (:func:`arrive`). Hugging Face Accelerate's habit ``if
accelerator.is_main_process: accelerator.save_state()`` leaves rank 0 waiting forever
in the first collective of the save, with nothing on screen. So before a checkpoint
collective, each rank announces itself on the job's TCP store (the
``MASTER_ADDR:MASTER_PORT`` store torchrun and ``accel launch`` give every worker) and
waits for the others, ``checkpoints.arrival_timeout`` at most; when they do not all
come, every rank that waited fails with one line naming the ranks that arrived. Each
process numbers its checkpoint collectives (1, 2, ...): ranks that call them in the
same order meet on the same number. Without a store to meet on (no ``MASTER_ADDR`` in
the environment: a process group made another way) the check is skipped.

**The steps** (:class:`DistContext`). The collectives inside run on a process group of
their own (gloo, created on the first save, which every rank makes): an async save then
talks in its background thread without interleaving with the training loop's
collectives. Each is bounded by that group's timeout
(``checkpoints.collective_timeout``).

**The error map** (:func:`attempt`, :func:`collect`). When one rank fails, the others
must not wait forever for it, and must raise the same kind of error. A step returns
``(result, None)`` or ``(None, "<ErrorClass>:rank N: message")``; :func:`collect` turns
that back into the exception on every rank.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from accel.errors import (
    AccelError,
    CollectiveMismatch,
    IntegrityError,
    LeaseHeld,
    UsageError,
    WriteFailed,
)
from accel.layout import rank_name

__all__ = [
    "SINGLE",
    "DistContext",
    "GroupSlot",
    "arrive",
    "attempt",
    "collect",
    "current_context",
    "named",
]

# -- the steps ------------------------------------------------------------------------


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    group: Any = None
    timeout: float | None = None  # of every collective of ``group``, in seconds

    # Objects travel as JSON in uint8 tensors, never through torch's *_object
    # collectives: those unpickle what they receive (and need numpy to do it).

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (JSON-compatible) on every rank."""
        if self.world_size == 1:
            return obj
        import torch
        import torch.distributed as dist

        payload = _encode(obj) if self.rank == 0 else b""
        size = torch.tensor([len(payload)], dtype=torch.int64)
        with self._bounded():
            dist.broadcast(size, src=0, group=self.group)
            buf = _tensor(payload) if self.rank == 0 else torch.empty(int(size), dtype=torch.uint8)
            dist.broadcast(buf, src=0, group=self.group)
        return _decode(buf)

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (JSON-compatible), in rank order."""
        if self.world_size == 1:
            return [obj]
        import torch
        import torch.distributed as dist

        payload = _encode(obj)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        with self._bounded():
            mine = torch.tensor([len(payload)], dtype=torch.int64)
            dist.all_gather(sizes, mine, group=self.group)
            longest = max(int(s) for s in sizes)
            bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world_size)]
            dist.all_gather(bufs, _tensor(payload.ljust(longest)), group=self.group)
        return [_decode(buf[: int(n)]) for buf, n in zip(bufs, sizes, strict=True)]

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[None]:
        """A collective that waited ``timeout`` for its peers: one line, not gloo's."""
        try:
            yield
        except RuntimeError as exc:
            if self.timeout is None or "timed out" not in str(exc).lower():
                raise
            raise CollectiveMismatch(
                f"a checkpoint collective on rank {self.rank} waited {self.timeout:g}s for the "
                "other ranks and gave up (checkpoints.collective_timeout): a rank is stuck, "
                "died, or did not call save_state/load_state"
            ) from exc


def _encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _tensor(payload: bytes) -> Any:
    import torch

    return torch.tensor(list(payload), dtype=torch.uint8)


def _decode(buf: Any) -> Any:
    return json.loads(bytes(buf.tolist()).decode("utf-8"))


SINGLE = DistContext(rank=0, world_size=1)


class GroupSlot:
    """The checkpoint context (and so the group) of one store, or of several that never
    run collectives at the same time: Accelerate's ``save_state(output_dir)`` makes a
    store per folder, all saving one after another in the script's thread. A gloo group
    costs each rank three threads and a socket per peer until the process ends (below):
    a group per folder would run a 64-rank job out of descriptors (``ulimit -n`` 1024) by
    its 16th save."""

    def __init__(self) -> None:
        self.ctx: DistContext | None = None


# Every checkpoint group this process made, kept until the interpreter's teardown. The
# last reference to a group tears it down in C++ (gloo joins its threads, closes one
# connection per peer) wherever it goes: with the store that made it, so as the locals of
# a script's main() go, where torch 2.6's gloo hung a rank whose peer had exited (CI)
# and no launcher can tell that the script was done. Kept here, it goes at the
# interpreter's teardown, which `accel launch` guards (accel.launch.teardown), as when a
# script keeps its Accelerator at module level. Torch has it unregistered by then:
# ``destroy_process_group()`` (Accelerator.end, or accel's exit handler) unregisters it.
_GROUPS: list[Any] = []


def current_context(previous: DistContext | None, timeout: float | None = None) -> DistContext:
    """The context of this process; a collective the first time a group is made.

    ``timeout`` (seconds) bounds every collective of the checkpoint group: a rank that
    waits longer for its peers fails instead of hanging.
    """
    dist = sys.modules.get("torch.distributed")
    initialized = dist is not None and dist.is_available() and dist.is_initialized()
    if not initialized:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world > 1:
            raise UsageError(
                f"WORLD_SIZE is {world} but torch.distributed is not initialized; create "
                "accel.Accelerator() (or call init_process_group) before saving"
            )
        return SINGLE
    assert dist is not None
    world = dist.get_world_size()
    if world == 1:
        return SINGLE
    if previous is not None and previous.world_size == world:
        return previous
    options: dict[str, Any] = {}
    if timeout is not None:
        options["timeout"] = timedelta(seconds=timeout)
    group = dist.new_group(backend="gloo", **options)
    _GROUPS.append(group)
    return DistContext(rank=dist.get_rank(), world_size=world, group=group, timeout=timeout)


# -- the error map --------------------------------------------------------------------

Outcome = tuple[Any, str | None]


def attempt(ctx: DistContext, fn: Callable[[], Any]) -> Outcome:
    """(result, None) or (None, error): a rank's failure travels to every rank.

    A single process raises directly, keeping the original exception.
    """
    if ctx.world_size == 1:
        return fn(), None
    try:
        return fn(), None
    except AccelError as exc:
        return None, f"{type(exc).__name__}:rank {ctx.rank}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the other ranks must not wait forever
        return None, f"AccelError:rank {ctx.rank}: {type(exc).__name__}: {exc}"


def on_every_rank(ctx: DistContext, fn: Callable[[], Any]) -> Any:
    """``fn()`` on every rank, which all fail together: the first failure in rank order is
    raised on every rank, so no rank goes on to a collective that another left (a rank
    that caught its error and went on would meet the others' next collective, not its
    own). A collective itself: every rank calls it."""
    value, error = attempt(ctx, fn)
    if ctx.world_size == 1:
        return value
    return collect((value, next((e for e in ctx.all_gather(error) if e), None)))


def collect(outcome: Outcome, default: type[AccelError] = AccelError) -> Any:
    """The value of ``outcome``, or its error raised as the class it names."""
    value, error = outcome
    if error is None:
        return value
    name, _, message = error.partition(":")
    cls = _ERRORS.get(name, default)
    raise cls(message)


_ERRORS: dict[str, type[AccelError]] = {
    cls.__name__: cls for cls in (AccelError, UsageError, IntegrityError, WriteFailed, LeaseHeld)
}


# -- arrival --------------------------------------------------------------------------

_local = threading.local()
_lock = threading.Lock()
_state: dict[str, Any] = {"seq": 0, "store": None, "where": None, "meeting": None}
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
    arrive_later(default_name, timeout, env)()


def arrive_later(
    default_name: str, timeout: float, env: Mapping[str, str] | None = None
) -> Callable[[], None]:
    """This rank's part in the next checkpoint collective's meeting, to call later: the
    call announces the rank on the store and waits for the others.

    An overlapped save hands that call to its writer: it runs beside training, and a rank
    that never came fails the save (raised by its next ``wait``) instead of stalling the
    caller for the store's round trips. The meeting's number is taken here, in call
    order, and its timeout counts from here. Each meeting is over on this rank before
    the next one is made (making it finishes the last one first): a rank that passed
    meeting N+1 may forget the keys of meeting N only because every rank was done with N
    before it announced N+1.
    """
    group = _group()
    if group is None:
        return _nothing
    rank, world = group
    env = os.environ if env is None else env
    store = _store(env)
    if store is None:
        return _nothing
    name = getattr(_local, "name", None) or default_name
    with _lock:
        previous, _state["meeting"] = _state["meeting"], None
    if previous is not None:
        with contextlib.suppress(Exception):  # its error is its own collective's to raise
            previous()
    with _lock:
        _state["seq"] += 1
        seq = _state["seq"]
        meeting = _state["meeting"] = _Meeting(store, env, seq, rank, world, name, timeout)
    return meeting


def _nothing() -> None:
    """The meeting of a process with no store to meet on (or alone): nothing to wait for."""


class _Meeting:
    """One rank's part in meeting ``seq``, played once, by whichever thread calls it
    first; every caller gets the same outcome."""

    def __init__(
        self,
        store: Any,
        env: Mapping[str, str],
        seq: int,
        rank: int,
        world: int,
        name: str,
        timeout: float,
    ) -> None:
        self.store, self.rank, self.world, self.name = store, rank, world, name
        self.prefix, self.before = _prefix(env, seq), _prefix(env, seq - 1)
        self.timeout, self.deadline = timeout, time.monotonic() + timeout
        self._lock = threading.Lock()
        self._done = False
        self._error: BaseException | None = None

    def __call__(self) -> None:
        with self._lock:
            if not self._done:
                self._done = True
                try:
                    _meet(self)
                    _forget(self.store, self.before, self.rank)
                except BaseException as exc:  # noqa: BLE001 - every caller gets it
                    self._error = exc
            if self._error is not None:
                raise self._error


def _meet(m: _Meeting) -> None:
    m.store.set(f"{m.prefix}/{rank_name(m.rank)}", m.name)
    if int(m.store.add(f"{m.prefix}/count", 1)) < m.world:
        _wait(m.store, m.prefix, m.rank, m.world, m.name, m.timeout, m.deadline)


def _wait(
    store: Any, prefix: str, rank: int, world: int, name: str, timeout: float, deadline: float
) -> None:
    count = f"{prefix}/count"
    # The first look comes soon: the ranks usually arrive within a fraction of a
    # millisecond of each other.
    pause = 0.0002
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
    return [r for r in range(world) if store.check([f"{prefix}/{rank_name(r)}"])]


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
        store.delete_key(f"{prefix}/{rank_name(rank)}")
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
