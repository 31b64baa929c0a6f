"""One background checkpoint save, its error kept for :meth:`Checkpoints.wait`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["AsyncSave"]

T = TypeVar("T")


class AsyncSave(Generic[T]):
    """Run ``write`` in a thread of its own; :meth:`join` returns its result or raises
    its error in the caller's thread."""

    def __init__(self, write: Callable[[], T], name: str) -> None:
        self._run = write
        self._result: T | None = None
        self._error: BaseException | None = None
        # Not a daemon: the interpreter waits for the last checkpoint before exiting.
        self._thread = threading.Thread(target=self._main, name=name)

    def _main(self) -> None:
        try:
            self._result = self._run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self._error = exc

    def start(self) -> AsyncSave[T]:
        self._thread.start()
        return self

    def join(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result
