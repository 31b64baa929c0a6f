"""When each worker process ended, to the millisecond: the real order of deaths.

torch's agent polls its workers (every ``monitor_interval``) and stamps a failure with
the poll's time, so two ranks that died a few milliseconds apart look simultaneous,
and a rank killed by the kernel (no error file) looks later than the peer whose
collective it broke. :class:`ExitWatch` runs one thread per worker blocked in
``waitid(WEXITED | WNOWAIT)``: the kernel wakes it the moment the worker ends, and
``WNOWAIT`` leaves the process unreaped, so torch's ``Popen`` still collects its
status as before. The workers are the launcher's own children (torch starts a binary
entrypoint with ``subprocess.Popen``), which is what ``waitid`` needs. Each end noted
also sets :attr:`ExitWatch.ended`, which cuts short the agent's sleep between two
checks of its workers (:func:`accel.launch._torch_compat.wake_on_exit`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Exit:
    """A worker ended at ``at``; ``exitcode`` as Popen reports it (-N: signal N)."""

    at: float
    exitcode: int | None


class ExitWatch:
    """Watch the workers of the current attempt; :meth:`exits` says who ended when."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._exits: dict[int, Exit] = {}
        self._generation = 0
        self._threads: list[threading.Thread] = []
        self._pids: dict[int, int] = {}
        self.ended = threading.Event()  # set at each end noted; its waiter clears it

    def watch(self, pids: Mapping[int, int]) -> None:
        """Start watching ``rank -> pid`` (a new attempt: what was seen before is dropped)."""
        with self._lock:
            self._generation += 1
            self._exits = {}
            self._threads = []
            self._pids = dict(pids)
            generation = self._generation
        if not hasattr(os, "waitid"):
            return  # no waitid (not POSIX): callers fall back to torch's poll times
        for rank, pid in pids.items():
            thread = threading.Thread(
                target=self._wait,
                args=(generation, rank, pid),
                name=f"accel-exit-watch-{rank}",
                daemon=True,
            )
            with self._lock:
                self._threads.append(thread)
            thread.start()

    def stopping(self) -> float:
        """The launcher begins stopping the workers: when (epoch seconds), taken after
        noting every worker that has already ended.

        A watch thread stamps an end when it runs, which on a loaded machine can be
        after the launcher began stopping the rest (seen: 0.4 ms after), and blame
        would call a rank SIGKILLed by the kernel one that accel stopped. What the
        kernel knows at this moment is read here, in the launcher's thread, without
        reaping (``WNOHANG | WNOWAIT``): those ends come before the stop.
        """
        with self._lock:
            generation, pids = self._generation, dict(self._pids)
        if hasattr(os, "waitid"):  # as in watch(): without it, torch's poll times
            for rank, pid in pids.items():  # one already noted keeps its first time
                self._look(generation, rank, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return time.time()

    def settle(self, timeout: float) -> None:
        """Let the watch note workers that have ended, ``timeout`` seconds at most.

        When torch reports a failure it has already stopped and reaped every worker,
        but a watch thread woken by that end may not have run yet on a loaded machine:
        without it, a rank accel stopped has no time of death but torch's, which torch
        truncates to the second, and would look as if it failed before the real one.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def exits(self) -> dict[int, Exit]:
        """``rank -> Exit`` of the workers of this attempt that have ended so far."""
        with self._lock:
            return dict(self._exits)

    def _wait(self, generation: int, rank: int, pid: int) -> None:
        self._look(generation, rank, pid, os.WEXITED | os.WNOWAIT)

    def _look(self, generation: int, rank: int, pid: int, options: int) -> None:
        """Note the worker's end if ``waitid`` (with ``options``, never reaping) finds it."""
        try:
            info = os.waitid(os.P_PID, pid, options)
        except ChildProcessError:
            # Reaped by torch before this thread got to wait: it ended by now.
            self._note(generation, rank, Exit(self._clock(), None))
            return
        except OSError:
            return
        if info is None:  # WNOHANG: still running
            return
        self._note(generation, rank, Exit(self._clock(), _exitcode(info)))

    def _note(self, generation: int, rank: int, found: Exit) -> None:
        with self._lock:
            if generation != self._generation or rank in self._exits:
                return
            self._exits[rank] = found
        self.ended.set()


def _exitcode(info: os.waitid_result) -> int | None:
    if info.si_code == os.CLD_EXITED:
        return int(info.si_status)
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return -int(info.si_status)
    return None
