"""No process left behind: the guard that outlives a SIGKILLed launcher.

Workers die with the launcher through a parent-death signal (see ``_bootstrap``), but
processes *they* started (data loader workers, a daemonized helper) would not. The
guard is a tiny process forked from the launcher before torch is imported; it waits
for the launcher to go away (end of file on a pipe only the launcher writes to, so
nothing can be missed) and then kills every process still carrying the run's
``ACCEL_RUN_ID`` in its environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

RUN_ID_VAR = "ACCEL_RUN_ID"
_PROC = Path("/proc")


def run_processes(run_id: str, exclude: frozenset[int] = frozenset()) -> list[int]:
    """Pids of the processes whose environment has ``ACCEL_RUN_ID=<run_id>`` (Linux)."""
    needle = f"{RUN_ID_VAR}={run_id}".encode()
    found = []
    for pid in _pids():
        if pid in exclude or pid == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (_PROC / str(pid) / "environ").read_bytes().split(b"\0"):
                found.append(pid)
    return found


def _pids() -> Iterator[int]:
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit():
                yield int(entry.name)


def kill_run_processes(run_id: str, exclude: frozenset[int] = frozenset()) -> int:
    """SIGKILL every process of the run (a few sweeps, to catch fresh forks); how many."""
    killed: set[int] = set()
    for _ in range(3):
        pids = run_processes(run_id, exclude)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if not pids:
            break
        time.sleep(0.05)
    return len(killed)


class Guard:
    """Forks the guard; keep the object alive for the whole run (its pipe is the link)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._write_fd: int | None = None
        self.pid: int | None = None

    def start(self) -> Guard:
        if not _PROC.is_dir():
            return self  # no /proc: the parent-death signal alone has to do
        read_fd, write_fd = os.pipe()
        launcher = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the forked guard
            _guard_main(read_fd, self.run_id, launcher)
        os.close(read_fd)
        self._write_fd, self.pid = write_fd, pid
        return self

    def stop(self) -> None:
        """The run is over: the guard sweeps once more and exits."""
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None


def _guard_main(read_fd: int, run_id: str, launcher: int) -> None:  # pragma: no cover
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, read_fd)
        os.closerange(read_fd + 1, 65536)
        while os.read(read_fd, 1):
            pass
        kill_run_processes(run_id, exclude=frozenset({launcher}))
    finally:
        os._exit(0)
