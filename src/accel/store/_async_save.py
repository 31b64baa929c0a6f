"""One background checkpoint save, its error kept for :meth:`Checkpoints.wait`."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["AsyncSave", "saving_note"]

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
