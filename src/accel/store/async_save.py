"""A checkpoint saved in the background: a snapshot of the state, then a thread that writes it.

:class:`SnapshotPool` copies the state tree into CPU memory before ``save`` returns,
reusing its buffers across saves: copying into buffers already touched by the previous
save avoids page faults, which cost more than the copy itself for large states; the
copies of contiguous CPU tensors run as 8 MiB memcpys on a few threads (numpy releases
the GIL), since the caller is blocked for exactly this long.

:class:`AsyncSave` writes the snapshot in a thread of its own and keeps its error for
:meth:`Checkpoints.wait`. While it runs, a note beside the worker's error file
(:func:`saving_note`) tells ``accel launch`` not to end a worker whose script returned
meanwhile (:mod:`accel.launch.teardown`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["AsyncSave", "SnapshotPool", "saving_note"]

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


class AsyncSave(Generic[T]):
    """Run ``write`` in a thread of its own; :meth:`join` returns its result or raises
    its error in the caller's thread."""

    def __init__(self, write: Callable[[], T], name: str) -> None:
        self._run = write
        self._result: T | None = None
        self._error: BaseException | None = None
        self._name = name
        self._thread: threading.Thread | None = None

    def _main(self, note: str | None) -> None:
        try:
            self._result = self._run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self._error = exc
        finally:
            if note is not None:
                with contextlib.suppress(OSError):
                    os.remove(note)

    def start(self) -> AsyncSave[T]:
        # The mark is made before the thread runs, in the caller's thread: a script that
        # returns right after save_state(async_save=True) is already marked as saving.
        # Not a daemon: the interpreter waits for the last checkpoint before exiting.
        self._thread = threading.Thread(target=self._main, args=(_note(),), name=self._name)
        self._thread.start()
        return self

    def join(self) -> T:
        assert self._thread is not None, "join() before start()"
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


# -- the snapshot -----------------------------------------------------------------------

_CHUNK = 8 << 20


class SnapshotPool:
    def __init__(self) -> None:
        self._buffers: list[Any] = []
        self._jobs: list[tuple[Any, Any]] = []
        self._threads: ThreadPoolExecutor | None = None

    def snapshot(self, tree: Any) -> Any:
        """A copy of ``tree`` whose tensors live in this pool's CPU buffers."""
        counter = [0]
        self._jobs = []
        copy = self._copy(tree, counter)
        jobs, self._jobs = self._jobs, []
        if len(jobs) > 1:
            if self._threads is None:
                # Imported here: the launcher imports this module for saving_note alone.
                from concurrent.futures import ThreadPoolExecutor

                workers = min(4, os.cpu_count() or 1)
                self._threads = ThreadPoolExecutor(workers, thread_name_prefix="accel-snap")
            list(self._threads.map(_memcpy, jobs))
        else:
            for job in jobs:
                _memcpy(job)
        return copy

    def _copy(self, value: Any, counter: list[int]) -> Any:
        kind = type(value)
        if kind in (dict, OrderedDict):
            return kind((k, self._copy(v, counter)) for k, v in value.items())
        if kind in (list, tuple):
            return kind(self._copy(v, counter) for v in value)
        import torch

        if isinstance(value, torch.Tensor):
            return self._tensor(value, counter)
        return value  # immutable leaves: numbers, strings, bytes, None, dtypes

    def _tensor(self, tensor: Any, counter: list[int]) -> Any:
        import torch

        index = counter[0]
        counter[0] += 1
        source = tensor.detach()
        if index < len(self._buffers):
            buf = self._buffers[index]
            if buf.shape == source.shape and buf.dtype == source.dtype:
                self._plan_copy(buf, source)
                return buf
        buf = torch.empty(source.shape, dtype=source.dtype, device="cpu")
        self._plan_copy(buf, source)
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
        if src.device.type != "cpu" or not src.is_contiguous() or src.numel() == 0:
            dst.copy_(src)
            return
        try:
            import numpy  # noqa: F401 - the memcpys go through numpy
        except ImportError:
            dst.copy_(src)
            return
        out, into = _bytes(dst), _bytes(src)
        for start in range(0, len(into), _CHUNK):
            self._jobs.append((out[start : start + _CHUNK], into[start : start + _CHUNK]))


def _memcpy(job: tuple[Any, Any]) -> None:
    import numpy as np

    np.copyto(job[0], job[1])


def _bytes(tensor: Any) -> Any:
    import torch

    return tensor.reshape(-1).view(torch.uint8).numpy()
