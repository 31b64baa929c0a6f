"""``accel logs --grep/--since``: line filters and the time index of rank logs.

Rank logs hold the workers' raw output, without timestamps. While it writes them, the
launcher keeps a small index beside each one, ``rank-N.log.idx``: lines of
``<byte offset> <unix time>``, at most one per second of output. ``--since`` seeks to
the first indexed offset at or after the cutoff (one-second granularity), found by a
binary search of the index file (the index of a month of output is tens of MB), then
read forward from there: a few windows of it, whatever its size.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from accel._fs import open_regular, read_lines
from accel.errors import UsageError
from accel.layout import LOG_INDEX_SUFFIX
from accel.units import DURATION_HELP, duration_hint, from_iso, parse_duration

INDEX_SUFFIX = LOG_INDEX_SUFFIX
INDEX_EVERY = 1.0  # seconds between index entries of one log
_ENTRY_MAX = 1024  # bytes of an index line: an entry is two numbers, a longer line is none
_WINDOW = 1 << 16  # bytes of the index one probe of the search reads


def index_path(log: Path) -> Path:
    return log.with_name(log.name + INDEX_SUFFIX)


class LogIndexWriter:
    """Appends ``offset time`` entries for one log, one per ``every`` seconds at most."""

    def __init__(self, log: Path, every: float = INDEX_EVERY) -> None:
        self.path = index_path(log)
        self.every = every
        self._last = -float("inf")

    def note(self, offset: int, now: float) -> None:
        """Called before writing at ``offset``; IO errors are ignored (it is a hint)."""
        if now - self._last < self.every:
            return
        self._last = now
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                os.write(fd, f"{offset} {now:.3f}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            return


def read_index(path: Path) -> list[tuple[int, float]]:
    """``(offset, time)`` entries in file order; unreadable lines are skipped."""
    try:
        return [
            entry
            for line in read_lines(path, limit=_ENTRY_MAX, chunk=_WINDOW)
            for entry in _entries(line)
        ]
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return []


def _entries(line: bytes) -> list[tuple[int, float]]:
    out = []
    for text in line.decode("ascii", errors="replace").splitlines():
        parts = text.split()
        try:
            out.append((int(parts[0]), float(parts[1])))
        except (IndexError, ValueError):
            continue
    return out


def offset_since(index: list[tuple[int, float]], cutoff: float, size: int) -> int:
    """Where output at or after ``cutoff`` begins (``size``: nothing that recent)."""
    times = [t for _, t in index]
    pos = bisect.bisect_left(times, cutoff)
    return index[pos][0] if pos < len(index) else size


def parse_since(text: str, now: float | None = None) -> float:
    """``10m`` (that long ago) or an ISO time (``2026-11-29T10:00``) -> a unix time."""
    now = time.time() if now is None else now
    try:
        return now - parse_duration(text)
    except UsageError:
        pass
    stamp = from_iso(text.strip())
    if stamp is None:
        raise UsageError(
            f"invalid --since {text!r}: expected {DURATION_HELP}, or a time like 2026-11-29T10:00"
            + duration_hint(text.strip())
        ) from None
    try:
        # a naive time is local time, as people write it; an aware one is not moved to
        # UTC first, which leaves datetime's range near year 1 and 9999
        return stamp.timestamp()
    except (OverflowError, ValueError, OSError):
        raise UsageError(
            f"invalid --since {text!r}: this machine's clock cannot place that local "
            "time; add its zone (like +00:00), or give a duration like 30d"
        ) from None


def line_filter(pattern: str | None) -> Callable[[str], bool]:
    """``--grep``: a Python regular expression searched in each line."""
    if not pattern:
        return lambda _line: True
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"invalid --grep {pattern!r}: {exc}") from None
    return lambda line: regex.search(line) is not None


def start_offset(log: Path, cutoff: float | None) -> int:
    """The byte offset ``--since`` starts ``log`` at (0 without a cutoff).

    A log without an index (written by an older accel) is shown whole when it was
    modified after the cutoff, else not at all.
    """
    if cutoff is None:
        return 0
    try:
        stat = log.stat()
    except OSError:
        return 0
    found = indexed_offset(index_path(log), cutoff, stat.st_size)
    if found is None:
        return 0 if stat.st_mtime >= cutoff else stat.st_size
    return found


def indexed_offset(path: Path, cutoff: float, size: int) -> int | None:
    """:func:`offset_since` of the index at ``path``, read a window at a time: its first
    entry at or after ``cutoff`` (``size``: none that recent); None when it holds none
    (or cannot be read). Binary search over its bytes, then read forward: a few windows
    of an index in time order, every line of one in disorder (a clock set back)."""
    try:
        fd = open_regular(path)
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return None
    try:
        low, high = 0, os.fstat(fd).st_size
        while high - low > _WINDOW:
            mid = (low + high) // 2
            entry = _probe(fd, mid)
            if entry is not None and entry[1] < cutoff:
                low = mid  # every entry before it is older (the index is in time order)
            else:
                high = mid
        return _scan(path, low, cutoff, size)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _probe(fd: int, pos: int) -> tuple[int, float] | None:
    """The first entry whose line starts at or after ``pos``, within a window."""
    data = os.pread(fd, _WINDOW, pos - 1)
    lines = data.split(b"\n")[1:-1]  # whole lines only: the first ends before pos
    return next((e for line in lines if len(line) <= _ENTRY_MAX for e in _entries(line)), None)


def _scan(path: Path, low: int, cutoff: float, size: int) -> int | None:
    """Forward from the line after ``low`` (the start when 0), as :func:`indexed_offset`."""
    lines = read_lines(path, max(low - 1, 0), limit=_ENTRY_MAX, chunk=_WINDOW)
    if low:
        next(lines, None)  # the line around low - 1 began before low
    seen = low > 0  # a probe found an entry before low
    for line in lines:
        for offset, stamp in _entries(line):
            if stamp >= cutoff:
                return offset
            seen = True
    return size if seen else None
