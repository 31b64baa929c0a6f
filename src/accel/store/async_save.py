"""A checkpoint saved in the background: a snapshot of the state, then a thread that writes it.

:class:`SnapshotPool` copies the state tree into CPU memory, reusing its buffers across
saves: copying into buffers already touched by the previous save avoids page faults,
which cost more than the copy itself for large states. :meth:`SnapshotPool.take` copies
the containers and the tensors that training may change at any moment (module buffers,
which forward rewrites without a trace) before ``save`` returns (32 MiB or more of them
as 8 MiB memcpys on a few threads: numpy releases the GIL); the rest (what only an
optimizer changes) is copied by :meth:`Snapshot.copy` in the writer's thread while the
next forward and backward run. :meth:`Snapshot.fence` waits for that copy; every
optimizer's ``step()`` calls it first (a global step pre-hook), so the copy is whole
before the state moves. CUDA tensors are copied into pinned buffers on a side stream
of their device, after an event recorded when the snapshot was taken: the device's copy
engine moves them while the next forward and backward run on the training stream.

:class:`AsyncSave` copies and writes the snapshot on the two threads a store keeps
(:class:`SaveThreads`) and keeps its error for :meth:`Checkpoints.wait`. While it runs,
a note beside the worker's error file (:func:`saving_note`) tells ``accel launch`` not
to end a worker whose script returned meanwhile (:mod:`accel.launch.teardown`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

__all__ = [
    "AsyncSave",
    "SaveThreads",
    "Snapshot",
    "SnapshotPool",
    "fence_all",
    "outside_optimizers",
    "saving_note",
]

T = TypeVar("T")
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # every worker of accel launch (and torchrun) has one


def saving_note(error_file: str) -> str:
    """Present beside a worker's error file while a background save runs in it: the
    launcher does not end a worker whose script returned meanwhile (accel.launch.teardown)."""
    return error_file + ".saving"


def _note() -> str | None:
    """Mark this worker as saving in the background; the mark's path (None: no launcher)."""
    error_file = os.environ.get(ERROR_FILE_ENV)
    path = saving_note(error_file) if error_file else None
    if path is not None:
        with contextlib.suppress(OSError), open(path, "w"):
            pass
    return path


def yield_cores() -> None:
    """Lower this thread's priority (Linux: a thread has its own nice value): the write
    of a snapshot already copied must not slow training down on busy cores; it has until
    the next save to finish."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


class SaveThreads:
    """The two threads a store's background saves run on, started by its first save and
    kept for the next: one copies the snapshot at training's priority, the other writes
    it niced (:func:`yield_cores`), each save's in turn. A thread started for each save
    cost its caller ``Thread.start()``, which waits until the new thread runs: on busy
    cores a median of 0.4 to 0.8 ms of an overlapped save's few, and a p90 of 2.7 to 4.6
    ms (docs/benchmarks.md). Work handed to them is done before the interpreter exits,
    as a non-daemon thread's is (:mod:`concurrent.futures` joins its threads at exit)."""

    def __init__(self) -> None:
        self._copier: ThreadPoolExecutor | None = None
        self._writer: ThreadPoolExecutor | None = None

    def executors(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        if self._copier is None or self._writer is None:
            from concurrent.futures import ThreadPoolExecutor

            self._copier = ThreadPoolExecutor(1, thread_name_prefix="accel-snapshot-copy")
            self._writer = ThreadPoolExecutor(
                1, thread_name_prefix="accel-save", initializer=yield_cores
            )
        return self._copier, self._writer


_threads = SaveThreads()  # for an AsyncSave given none


class AsyncSave(Generic[T]):
    """Run ``copy`` (if any) on the copying thread, then ``write`` on the writing thread
    of ``threads``; :meth:`join` returns ``write``'s result or raises the error of either
    in the caller's thread."""

    def __init__(
        self,
        write: Callable[[], T],
        *,
        copy: Callable[[], None] | None = None,
        threads: SaveThreads | None = None,
    ) -> None:
        self._write = write
        self._copy = copy
        self._threads = threads or _threads
        self._future: Future[T] | None = None

    def start(self) -> AsyncSave[T]:
        # The mark is made before the work is handed on, in the caller's thread: a script
        # that returns right after save_state(async_save=True) is already marked as saving.
        note = _note()
        copier, writer = self._threads.executors()
        copy, write = self._copy, self._write
        copied = copier.submit(copy) if copy is not None else None

        def finish() -> T:
            try:
                if copied is not None:
                    copied.result()  # its error is this save's
                return write()
            finally:
                if note is not None:
                    with contextlib.suppress(OSError):
                        os.remove(note)

        self._future = writer.submit(finish)
        return self

    def join(self) -> T:
        assert self._future is not None, "join() before start()"
        return self._future.result()


# -- the snapshot -----------------------------------------------------------------------

_CHUNK = 8 << 20
# Copies due before ``take`` returns go to a few threads only from this many bytes on:
# below it, handing them to the pool's threads (each woken by the scheduler, on cores the
# training processes keep busy) cost more than the copy (the RNG states: a few KiB).
_THREADED = 4 * _CHUNK

#: Test seams (None in normal use): ``_before_copy`` runs in the copying thread before
#: the background copies start; ``_on_fence`` runs in the fencing thread before it waits.
#: Tests hold the copy on an event that the fence sets: no timing involved.
_before_copy: Callable[[], None] | None = None
_on_fence: Callable[[], None] | None = None

_in_flight: set[Snapshot] = set()
_hooked = False


def fence_all() -> None:
    """Wait until every snapshot being copied in this process is copied."""
    for snapshot in list(_in_flight):
        snapshot.fence()


def _fence_before_any_step(*_: Any) -> None:
    fence_all()


def _hook_optimizers() -> None:
    """Every optimizer's ``step()`` waits for the snapshot in flight, prepared or not."""
    global _hooked
    if not _hooked:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(_fence_before_any_step)
        _hooked = True


def outside_optimizers(optimizers: Any) -> Callable[[Any], bool]:
    """For ``Checkpoints.save(copy_now=...)``: true for a tensor that none of
    ``optimizers`` owns (a parameter of theirs, or their state): module buffers, frozen
    parameters, anything else training may change outside a ``step()``."""
    import torch

    owned: set[int] = set()
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            owned.update(_storage(p) for p in group["params"])
        for state in optimizer.state.values():
            owned.update(_storage(v) for v in state.values() if isinstance(v, torch.Tensor))
    owned.discard(0)  # empty tensors: no storage to tell apart
    return lambda tensor: _storage(tensor) not in owned


def _storage(tensor: Any) -> int:
    local = getattr(tensor, "_local_tensor", tensor)  # a DTensor's shard
    return int(local.untyped_storage().data_ptr())


class Snapshot:
    """A copy of a state tree, made in two parts: what the caller must not wait for is
    copied by :meth:`copy` (in the writer's thread), while training goes on.

    :attr:`tree` is the copy (the pool's buffers); it is whole once :meth:`copy`
    returned. :meth:`fence` waits for that. A tensor whose version counter moved before
    its copy was done is listed in :attr:`torn`: the writer refuses to commit it.
    """

    def __init__(self, tree: Any, jobs: list[tuple[Any, Any, int, str]]) -> None:
        self.tree = tree
        self.torn: list[str] = []
        self.waiting = threading.Event()  # something waited at the fence
        # Device tensors go through a side stream into pinned buffers (:func:`_from_device`)
        # once the work queued before this moment (the optimizer's step) is done.
        self.on_host = all(src.device.type == "cpu" for _, src, _, _ in jobs)
        self._ready = {} if self.on_host else _queued_so_far(src for _, src, _, _ in jobs)
        self._jobs = jobs
        self._done = threading.Event()
        if jobs:
            _hook_optimizers()
            _in_flight.add(self)
        else:
            self._done.set()

    def copy(self) -> None:
        """Copy the tensors left for the background, then check their versions."""
        try:
            if self._jobs and _before_copy is not None:
                _before_copy()
            cuda = [(dst, src) for dst, src, _, _ in self._jobs if src.device.type == "cuda"]
            if cuda:
                _from_device(cuda, self._ready)
            for dst, src, _, _ in self._jobs:
                if src.device.type != "cuda":
                    _copy_alone(dst, src)
            self._check()
        finally:
            self._let_go()

    def sources(self) -> Any:
        """:attr:`tree` with the tensors left for the background read from the caller's
        own, not copied: for a writer that reads them once, where :meth:`copy` and a write
        of the copy read them twice. The fence waits until :meth:`read` is called, which
        must follow whatever happens."""
        if self._jobs and _before_copy is not None:
            _before_copy()
        swap = {id(dst): src.detach() for dst, src, _, _ in self._jobs}
        return _swapped(self.tree, swap) if swap else self.tree

    def read(self) -> bool:
        """The sources of :meth:`sources` were read (again: a no-op): their versions are
        checked and the fence lets training go on. Whether none of them moved."""
        if not self._done.is_set():
            try:
                self._check()
            finally:
                self._let_go()
        return not self.torn

    def _check(self) -> None:
        moved = [where for _, src, version, where in self._jobs if src._version != version]
        self.torn = [_spelled(where) for where in moved]

    def _let_go(self) -> None:
        self._jobs = []  # the sources are the caller's: hold them no longer
        _in_flight.discard(self)
        self._done.set()

    def fence(self) -> None:
        """Wait until :meth:`copy` is done (not the write that follows it)."""
        self.waiting.set()
        if _on_fence is not None and not self._done.is_set():
            _on_fence()
        self._done.wait()


class SnapshotPool:
    def __init__(self) -> None:
        self._buffers: list[Any] = []
        self._jobs: list[tuple[Any, Any]] = []
        self._later: list[tuple[Any, Any, int, str]] = []
        self._threads: ThreadPoolExecutor | None = None

    def snapshot(self, tree: Any) -> Any:
        """A copy of ``tree`` whose tensors live in this pool's CPU buffers."""
        return self.take(tree, None).tree

    def take(self, tree: Any, later: Callable[[Any], bool] | None) -> Snapshot:
        """A :class:`Snapshot` of ``tree``: containers and every tensor for which ``later``
        is false are copied now; the rest by the snapshot's :meth:`Snapshot.copy`."""
        self._jobs, self._later = [], []
        copy = self._copy(tree, [0], later, None)
        jobs, self._jobs = self._jobs, []
        if sum(job[1].nbytes for job in jobs) >= _THREADED:
            if self._threads is None:
                # Imported here: the launcher imports this module for saving_note alone.
                from concurrent.futures import ThreadPoolExecutor

                workers = min(4, os.cpu_count() or 1)
                self._threads = ThreadPoolExecutor(workers, thread_name_prefix="accel-snap")
            list(self._threads.map(_memcpy, jobs))
        else:
            for job in jobs:
                _memcpy(job)
        background, self._later = self._later, []
        return Snapshot(copy, background)

    def _copy(self, value: Any, counter: list[int], later: Any, where: Any) -> Any:
        kind = type(value)
        if kind in (dict, OrderedDict):
            items = value.items()
            return kind((k, self._copy(v, counter, later, (where, k))) for k, v in items)
        if kind in (list, tuple):
            numbered = enumerate(value)
            return kind(self._copy(v, counter, later, (where, i)) for i, v in numbered)
        import torch

        if isinstance(value, torch.Tensor):
            buf = self._buffer(value.detach(), counter)
            if later is not None and later(value):
                self._later.append((buf, value, value._version, where))
            else:
                self._plan_copy(buf, value.detach())
            return buf
        return value  # immutable leaves: numbers, strings, bytes, None, dtypes

    def _buffer(self, source: Any, counter: list[int]) -> Any:
        import torch

        index = counter[0]
        counter[0] += 1
        pinned = source.device.type == "cuda"  # a copy from the device that need not block
        if index < len(self._buffers):
            buf = self._buffers[index]
            same = buf.shape == source.shape and buf.dtype == source.dtype
            if same and (not pinned or buf.is_pinned()):
                return buf
        buf = torch.empty(source.shape, dtype=source.dtype, device="cpu", pin_memory=pinned)
        if index < len(self._buffers):
            self._buffers[index] = buf
        else:
            self._buffers.append(buf)
        return buf

    def _plan_copy(self, dst: Any, src: Any) -> None:
        """Queue one memcpy per 8 MiB for contiguous CPU tensors; copy others now.

        torch's own parallel copy spins up its thread pool, which costs more than the
        copy on a busy machine (measured 3x slower than plain memcpy on 2 loaded cores).
        """
        if not _plain(src):
            dst.copy_(src)
            return
        out, into = _bytes(dst), _bytes(src)
        for start in range(0, len(into), _CHUNK):
            self._jobs.append((out[start : start + _CHUNK], into[start : start + _CHUNK]))


def _swapped(value: Any, swap: dict[int, Any]) -> Any:
    """``value`` with the tensors whose ids ``swap`` holds replaced (containers rebuilt
    as :meth:`SnapshotPool.take` built them)."""
    kind = type(value)
    if kind in (dict, OrderedDict):
        return kind((k, _swapped(v, swap)) for k, v in value.items())
    if kind in (list, tuple):
        return kind(_swapped(v, swap) for v in value)
    return swap.get(id(value), value)


def _spelled(where: Any) -> str:
    """``state['models'][0]['w']`` from the path ``((((None, 0), 'models'), 0), 'w')`` in
    the tree ``(state, rank_state)``: spelled only for an error, a save walks thousands."""
    keys: list[Any] = []
    while where is not None:
        where, key = where
        keys.append(key)
    keys.reverse()
    root = {0: "state", 1: "rank_state"}.get(keys[0], "") if keys else ""
    return root + "".join(f"[{key!r}]" for key in keys[1:])


def _plain(src: Any) -> bool:
    """Copied as raw bytes through numpy: a contiguous, non-empty CPU tensor."""
    if src.device.type != "cpu" or not src.is_contiguous() or src.numel() == 0:
        return False
    try:
        import numpy  # noqa: F401 - the memcpys go through numpy
    except ImportError:
        return False
    return True


def _copy_alone(dst: Any, src: Any) -> None:
    """One copy in one thread, 8 MiB at a time: numpy releases the GIL for each, so the
    training thread runs beside it, and no thread pool competes with training's own."""
    src = src.detach()
    if not _plain(src):
        dst.copy_(src)
        return
    out, into = _bytes(dst), _bytes(src)
    for start in range(0, len(into), _CHUNK):
        _memcpy((out[start : start + _CHUNK], into[start : start + _CHUNK]))


_side_streams: dict[Any, Any] = {}  # device -> the stream snapshots copy on


def _queued_so_far(sources: Any) -> dict[Any, Any]:
    """device -> an event after the work queued on its current stream so far (called in
    the training thread, right after the optimizer's step)."""
    import torch

    events = {}
    for src in sources:
        if src.device.type == "cuda" and src.device not in events:
            events[src.device] = torch.cuda.current_stream(src.device).record_event()
    return events


def _from_device(jobs: list[tuple[Any, Any]], ready: dict[Any, Any]) -> None:
    """Copy device tensors into their (pinned) host buffers on a side stream of each
    device, after ``ready``'s events: the copy engine moves them while the next forward
    and backward run on the training stream. Returns when they are copied."""
    try:
        _on_side_streams(jobs, ready)
    except RuntimeError:  # no stream to be had: the copy the default stream makes
        for dst, src in jobs:
            dst.copy_(src.detach())


def _on_side_streams(jobs: list[tuple[Any, Any]], ready: dict[Any, Any]) -> None:
    import torch

    done = []
    for device in {src.device for _, src in jobs}:
        side = _side_streams.get(device)
        if side is None:
            side = _side_streams[device] = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        with torch.cuda.stream(side):
            if device in ready:
                side.wait_event(ready[device])
            for dst, src in jobs:
                if src.device == device:
                    dst.copy_(src.detach(), non_blocking=dst.is_pinned())
            done.append(side.record_event())
    for event in done:
        event.synchronize()


def _memcpy(job: tuple[Any, Any]) -> None:
    import numpy as np

    np.copyto(job[0], job[1])


def _bytes(tensor: Any) -> Any:
    import torch

    return tensor.reshape(-1).view(torch.uint8).numpy()
