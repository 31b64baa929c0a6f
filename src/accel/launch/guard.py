"""No process left behind: every descendant of a run ends with it, whatever it did.

A worker's child may start its own session, clear its environment and double-fork
(a daemon): neither its process group nor ``ACCEL_RUN_ID`` finds it then. What does is
the process tree, and two things keep that tree whole:

- the launcher makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a
  process orphaned under it is re-parented to the launcher, not to init, so every
  process the run started stays a descendant of the launcher while it lives;
- the *guard*, a tiny process forked from the launcher before torch is imported,
  records that tree (pid and start time of every descendant, a few times a second) and
  waits for the launcher to go away (end of file on a pipe only the launcher writes
  to, so a SIGKILL cannot be missed). It starts a session of its own, so a signal to
  the launcher's process group (a shell's ``kill -9 %1``, a terminal's hang-up) does
  not reach it: it outlives the launcher to end what the launcher left.

At the end of a run the launcher ends its descendants itself; when the launcher is
killed, the guard ends every process it recorded, then removes the private scratch
folders the launcher made and named to it (:meth:`Guard.remove_at_end`: the FIFOs of
the logs, the preload socket), which the launcher's own cleanup would have removed.
Ending is *freeze, then kill*: each process is stopped (SIGSTOP) before its children
are listed, so none can fork or orphan a new one in between, and then all are
SIGKILLed. The start time recorded with each pid makes sure a recycled pid is never
killed. Processes with the run's ``ACCEL_RUN_ID`` in their environment are ended too
(the net the guard used before).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

RUN_ID_VAR = "ACCEL_RUN_ID"
PR_SET_CHILD_SUBREAPER = 36
TRACK_INTERVAL = 0.25  # seconds between snapshots of the tree (more on a crowded host)
_PROC = Path("/proc")

Table = Mapping[int, tuple[int, int]]  # pid -> (parent pid, start time in clock ticks)


# -- the process table ------------------------------------------------------------------


def process_table() -> dict[int, tuple[int, int]]:
    """``pid -> (ppid, start time)`` of every process (Linux ``/proc``)."""
    table = {}
    for pid in _pids():
        entry = _stat(pid)
        if entry is not None:
            table[pid] = entry
    return table


def _stat(pid: int) -> tuple[int, int] | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.read(fd, 2048)
        finally:
            os.close(fd)
        fields = data.rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _pids() -> Iterator[int]:
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit():
                yield int(entry.name)


def descendants(root: int, table: Table, *, since: int = 0) -> dict[int, int]:
    """``pid -> start time`` of every descendant of ``root`` started at or after ``since``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, int] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in found or pid == root:
            continue
        if table[pid][1] >= since:
            found[pid] = table[pid][1]
        stack.extend(children.get(pid, ()))
    return found


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


# -- ending processes ---------------------------------------------------------------------


def end_processes(known: Mapping[int, int], exclude: Iterable[int] = ()) -> set[int]:
    """Freeze every process of ``known`` (pid -> start time) still alive, and every
    descendant of theirs, then SIGKILL them all; returns the pids killed."""
    spared = {os.getpid(), *exclude}
    table = process_table()
    frontier = {p for p, start in known.items() if p not in spared and _same(table, p, start)}
    frozen: set[int] = set()
    while frontier:
        for pid in frontier:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= frontier
        table = process_table()  # children forked before the stop are listed now
        frontier = {
            p for p, (ppid, _) in table.items() if ppid in frozen and p not in frozen | spared
        }
    for pid in frozen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return frozen


def _same(table: Table, pid: int, start: int) -> bool:
    return pid in table and table[pid][1] == start


def kill_run_processes(run_id: str, exclude: frozenset[int] = frozenset()) -> int:
    """End every process carrying the run's ``ACCEL_RUN_ID`` (and its descendants)."""
    table = process_table()
    marked = {p: table[p][1] for p in run_processes(run_id, exclude) if p in table}
    return len(end_processes(marked, exclude))


def become_subreaper(on: bool = True) -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


# -- the guard ----------------------------------------------------------------------------


class Guard:
    """Forks the guard; keep the object alive for the whole run (its pipe is the link)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._write_fd: int | None = None
        self.pid: int | None = None
        self._since = 0
        self._subreaper = False

    def start(self) -> Guard:
        if not _PROC.is_dir():
            return self  # no /proc: the parent-death signal alone has to do
        me = os.getpid()
        self._since = _ticks_now()
        self._subreaper = become_subreaper()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the forked guard
            _guard_main(read_fd, self.run_id, me, self._since)
        os.close(read_fd)
        self._write_fd, self.pid = write_fd, pid
        return self

    def stop(self) -> None:
        """The run is over: end every process it left, then let the guard go."""
        if self._write_fd is not None:
            self.end_descendants()
            os.close(self._write_fd)
            self._write_fd = None
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None
        if self._subreaper:
            become_subreaper(False)
            self._subreaper = False

    def remove_at_end(self, folder: Path) -> None:
        """Have the guard remove ``folder`` (one the launcher made for this run) if the
        launcher dies before it does."""
        if self._write_fd is not None:
            os.write(self._write_fd, os.fsencode(folder) + b"\0")

    def end_descendants(self) -> set[int]:
        """End what the run left below the launcher (orphans included) and reap them."""
        found = descendants(os.getpid(), process_table(), since=self._since)
        killed = end_processes(found, exclude={self.pid or 0})
        _reap(killed)
        return killed


def _ticks_now() -> int:
    """Now, in the unit of a process's start time (clock ticks since boot), a tick early."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, int(uptime * os.sysconf("SC_CLK_TCK")) - 1)


def _reap(pids: Iterable[int], timeout: float = 2.0) -> None:
    """Collect those of ``pids`` that are our children (orphans re-parented to us)."""
    waiting = set(pids)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid  # not ours, or already collected
            if done:
                waiting.discard(pid)
        if waiting:
            time.sleep(0.01)


def _guard_main(read_fd: int, run_id: str, launcher: int, since: int) -> None:  # pragma: no cover
    try:
        os.setsid()  # out of the launcher's group: a kill of that group (`kill -9 %1`) spares it
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, read_fd)
        os.closerange(read_fd + 1, 65536)
        folders: list[bytes] = []
        tracked = _track(read_fd, launcher, since, folders)
        end_processes(tracked, exclude={launcher})
        kill_run_processes(run_id, exclude=frozenset({launcher}))
        for folder in folders:  # gone already after a run that ended as it should
            shutil.rmtree(os.fsdecode(folder), ignore_errors=True)
    finally:
        os._exit(0)


def _track(
    read_fd: int, launcher: int, since: int, folders: list[bytes]
) -> dict[int, int]:  # pragma: no cover
    """Snapshots of the launcher's tree until the launcher closes the pipe or dies; the
    folders it names on the pipe (each ended by a NUL) are added to ``folders``."""
    tracked: dict[int, int] = {}
    wait = TRACK_INTERVAL
    named = b""
    while True:
        ready, _, _ = select.select([read_fd], [], [], wait)
        if ready:
            data = os.read(read_fd, 4096)
            if not data:
                return tracked
            *done, named = (named + data).split(b"\0")
            folders.extend(done)
        began = time.monotonic()
        table = process_table()
        tracked = {p: s for p, s in tracked.items() if _same(table, p, s)}  # drop the gone
        tracked.update(descendants(launcher, table, since=since))
        tracked.pop(os.getpid(), None)
        # Scanning /proc costs about 12 us a process: stay under 5% of a core.
        wait = max(TRACK_INTERVAL, 20 * (time.monotonic() - began))
