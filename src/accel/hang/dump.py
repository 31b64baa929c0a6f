"""Stack dumps on demand: signal the workers, collect what faulthandler wrote.

Workers dump into ``<run>/stacks/rank-N.txt`` (see :mod:`accel.hang.worker`). Only
workers that catch the signal are signalled: an uncaught SIGUSR1 would kill them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from accel._fs import read_from, read_json
from accel.hang.worker import STACK_SIGNAL, crash_path, stacks_path
from accel.layout import WORKERS_FILE as WORKERS_FILE  # re-exported
from accel.layout import rank_log


def stacks_file(run_dir: Path, rank: int | str) -> Path:
    return Path(stacks_path(str(run_dir), rank))


def read_crash(run_dir: Path, rank: int | str, since: float) -> tuple[float, str] | None:
    """(when, stacks) of the fatal-signal dump a worker wrote after ``since``, if any."""
    path = Path(crash_path(str(run_dir), rank))
    try:
        stat = path.stat()
        if stat.st_size == 0 or stat.st_mtime < since:
            return None
        text = read_from(path).decode("utf-8", errors="replace")
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        return None
    return stat.st_mtime, text.rstrip("\n")


def catches(pid: int, sig: int = STACK_SIGNAL) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (Linux: SigCgt in /proc/<pid>/status)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return sys.platform != "linux" and _can_signal(pid)
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _can_signal(pid: int) -> bool:
    """Whether this process may signal ``pid`` (one it may not is as good as gone here;
    a liveness probe that must not sweep another user's data is memtier's ``_alive``)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def dump_stacks(run_dir: Path, pids: Mapping[int, int], wait: float = 3.0) -> dict[int, str]:
    """Signal each rank's worker and return ``rank -> its stack dump``.

    A rank whose worker is gone, or does not catch the signal (not started by
    ``accel launch``, or still starting), maps to a one-line explanation instead.
    """
    pending: dict[int, tuple[Path, int]] = {}
    out: dict[int, str] = {}
    for rank, pid in sorted(pids.items()):
        path = stacks_file(run_dir, rank)
        offset = _size(path)
        if not catches(pid):
            out[rank] = f"(pid {pid} is gone or does not dump stacks on SIGUSR1)"
            continue
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError as exc:
            out[rank] = f"(pid {pid}: {exc.strerror})"
            continue
        pending[rank] = (path, offset)
    out.update(_collect(pending, wait))
    return dict(sorted(out.items()))


def _collect(pending: Mapping[int, tuple[Path, int]], wait: float) -> dict[int, str]:
    """Wait until every file grew and then stopped growing (faulthandler gives no end mark)."""
    deadline = time.monotonic() + wait
    sizes = {rank: -1 for rank in pending}
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = {rank: _size(path) for rank, (path, _) in pending.items()}
        settled = all(now[r] > pending[r][1] and now[r] == sizes[r] for r in pending)
        sizes = now
        if settled:
            break
    return {rank: _read_from(path, offset) for rank, (path, offset) in pending.items()}


def _read_from(path: Path, offset: int) -> str:
    try:
        text = read_from(path, offset).decode("utf-8", errors="replace")
    except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
        text = ""
    return text.rstrip("\n") or "(no stack was written in time)"


def write_workers(run_dir: Path, attempt: int, pids: Mapping[int, int]) -> None:
    """Record this node's live workers for ``accel stack`` (rewritten at every attempt)."""
    from accel._fs import atomic_write_json

    data = {"attempt": attempt, "pids": {str(r): p for r, p in sorted(pids.items())}}
    atomic_write_json(Path(run_dir) / WORKERS_FILE, data, durable=False)


def read_workers(run_dir: Path) -> dict[int, int]:
    """``rank -> pid`` of the run's workers on this node ({} when unknown)."""

    try:
        data = read_json(Path(run_dir) / WORKERS_FILE)
        return {int(r): int(p) for r, p in dict(data["pids"]).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def append_to_rank_logs(run_dir: Path, stacks: Mapping[int, str], title: str) -> None:
    """Append each dump to ``rank-N.log`` under a marked header (one write per rank)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    for rank, text in stacks.items():
        log = run_dir / rank_log(rank)
        block = f"===== accel: {title} at {stamp} =====\n{text}\n===== end of stacks =====\n"
        with contextlib.suppress(OSError), open(log, "a") as fh:
            fh.write(("" if _ends_a_line(log) else "\n") + block)


def _ends_a_line(log: Path) -> bool:
    """Whether ``log`` ends with a newline (a progress bar may have left its line open)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"
    except OSError:  # empty or missing
        return True
