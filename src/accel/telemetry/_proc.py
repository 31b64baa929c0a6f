"""Per-process readings: CPU time, RSS and threads of one pid.

Linux: straight from ``/proc/<pid>/stat`` (one small read, no dependency). Elsewhere:
psutil when it is importable, else nothing. A process that is gone, or that we may
not read, gives ``None``: telemetry never raises into the launcher.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcReading:
    """Raw counters of one process at one instant; ``age`` is seconds since it started."""

    pid: int
    cpu_seconds: float
    age: float
    rss_bytes: int
    threads: int


def cpu_percent(prev: ProcReading | None, cur: ProcReading) -> float:
    """CPU use between two readings (100 = one core busy); since start without ``prev``."""
    fresh = prev is None or prev.pid != cur.pid or cur.age <= prev.age
    cpu = cur.cpu_seconds if fresh or prev is None else cur.cpu_seconds - prev.cpu_seconds
    span = cur.age if fresh or prev is None else cur.age - prev.age
    if span <= 0:
        return 0.0
    return round(max(0.0, cpu / span * 100.0), 1)


def parse_stat(
    text: str, uptime: float, ticks: int, page_size: int, pid: int
) -> ProcReading | None:
    """A reading from the text of ``/proc/<pid>/stat`` (see proc(5)).

    None for a process that is exiting: a zombie, or one still running ``exit`` whose
    memory is already released (RSS 0; a live user process always maps some pages).
    Its figures are the process tearing down, not the rank at work.
    """
    # The command name is in parentheses and may itself contain spaces and parentheses.
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # exited, not yet reaped: no memory, nothing to report
        return None
    utime, stime = int(fields[11]), int(fields[12])
    threads, start, rss_pages = int(fields[17]), int(fields[19]), int(fields[21])
    if rss_pages <= 0:
        return None
    return ProcReading(
        pid=pid,
        cpu_seconds=(utime + stime) / ticks,
        age=max(0.0, uptime - start / ticks),
        rss_bytes=rss_pages * page_size,
        threads=threads,
    )


def _read_linux(pid: int) -> ProcReading | None:
    try:
        text = _read_small(f"/proc/{pid}/stat")
        uptime = float(_read_small("/proc/uptime").split()[0])
        return parse_stat(text, uptime, _ticks(), _page_size(), pid)
    except (OSError, ValueError, IndexError):
        return None


def _read_small(path: str) -> str:
    # One read(2) of a /proc file: cheaper than open() with its buffering layers.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode("ascii", errors="replace")
    finally:
        os.close(fd)


def _read_psutil(pid: int) -> ProcReading | None:
    try:
        import psutil
    except ImportError:
        return None
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            rss = int(proc.memory_info().rss)
            if rss <= 0:  # exiting: see parse_stat
                return None
            times = proc.cpu_times()
            return ProcReading(
                pid=pid,
                cpu_seconds=float(times.user + times.system),
                age=max(0.0, time.time() - proc.create_time()),
                rss_bytes=rss,
                threads=int(proc.num_threads()),
            )
    except Exception:  # noqa: BLE001 - psutil raises its own family; none may escape
        return None


@functools.cache
def _ticks() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


@functools.cache
def _page_size() -> int:
    return int(os.sysconf("SC_PAGE_SIZE"))


def reader() -> Callable[[int], ProcReading | None]:
    """The best reader for this platform (one that always answers None if none works)."""
    if sys.platform.startswith("linux") and _read_linux(os.getpid()) is not None:
        return _read_linux
    return _read_psutil
