"""``accel logs --grep/--since``: line filters and the time index of rank logs.

Rank logs hold the workers' raw output, without timestamps. While it writes them, the
launcher keeps a small index beside each one, ``rank-N.log.idx``: lines of
``<byte offset> <unix time>``, at most one per second of output. ``--since`` seeks to
the first indexed offset at or after the cutoff (one-second granularity).
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from accel._fs import read_from
from accel.errors import UsageError
from accel.layout import LOG_INDEX_SUFFIX
from accel.units import DURATION_HELP, parse_duration

INDEX_SUFFIX = LOG_INDEX_SUFFIX
INDEX_EVERY = 1.0  # seconds between index entries of one log


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
    out = []
    try:
        text = read_from(path).decode("ascii", errors="replace")
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return []
    for line in text.splitlines():
        parts = line.split()
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
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"invalid --since {text!r}: expected {DURATION_HELP}, or a time like 2026-11-29T10:00"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()  # a naive time is local time, as people write it
    return stamp.astimezone(timezone.utc).timestamp()


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
    index = read_index(index_path(log))
    if not index:
        return 0 if stat.st_mtime >= cutoff else stat.st_size
    return offset_since(index, cutoff, stat.st_size)
