"""Stack dumps on demand: signal the workers, collect what faulthandler wrote.

Workers dump into ``<run>/stacks/rank-N.txt`` (see :mod:`accel.hang.worker`). Only
workers that catch the signal are signalled: an uncaught SIGUSR1 would kill them.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from accel._fs import open_regular_append, read_from, read_json, read_regular
from accel.hang.worker import RUN_DIR_ENV, STACK_SIGNAL, crash_path, stacks_path
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


# The most of /proc/<pid>/environ read (Linux caps arguments and environment together
# at a quarter of the stack limit: 2 MiB by default); a longer one proves nothing.
_ENVIRON_LIMIT = 8 << 20


def belongs_to(pid: int, run_dir: Path, launcher_pid: int | None = None) -> bool:
    """Whether ``pid`` is a worker of the run in ``run_dir``: its environment names that
    folder in ``ACCEL_RUN_DIR``, where its SIGUSR1 handler writes its dumps
    (:func:`accel.hang.worker.install_stack_dump_handler`); or, forked from ``--preload``'s
    template (whose environment ``/proc`` shows), it runs the template of this run's
    launcher, ``launcher_pid``. ``workers.json`` is only a file in the workspace: a pid it
    names is signalled only with this proof, and what cannot be read (gone, another
    user's, no ``/proc``) is none."""
    if launcher_pid is not None and _forked_by(pid, launcher_pid):
        return True
    try:
        environ = read_regular(f"/proc/{pid}/environ", _ENVIRON_LIMIT)
    except (OSError, ValueError):  # ValueError: DamagedFile (too long, not a file)
        return False
    prefix = RUN_DIR_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return _same_folder(os.fsdecode(entry[len(prefix) :]), run_dir)
    return False


_TEMPLATE = os.fsencode(Path(__file__).resolve().parents[1] / "launch" / "_template.py")


def _forked_by(pid: int, launcher_pid: int) -> bool:
    """``pid`` runs the preload template (``_template.py FD LAUNCHER_PID ...``, see
    :mod:`accel.launch.preload`) of the launcher ``launcher_pid``."""
    try:
        argv = read_regular(f"/proc/{pid}/cmdline", _ENVIRON_LIMIT).split(b"\0")
    except (OSError, ValueError):
        return False
    at = next((i for i, arg in enumerate(argv) if os.path.realpath(arg) == _TEMPLATE), None)
    return at is not None and argv[at + 2 : at + 3] == [str(launcher_pid).encode()]


def _same_folder(named: str, run_dir: Path) -> bool:
    if not named:
        return False
    if os.path.abspath(named) == os.path.abspath(run_dir):
        return True
    try:  # the same folder reached another way (a linked workspace, a relative path)
        a, b = os.stat(named), os.stat(run_dir)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(a.st_mode) and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def dump_stacks(
    run_dir: Path,
    pids: Mapping[int, int],
    wait: float = 3.0,
    *,
    launcher_pid: int | None = None,
    trusted: bool = False,
) -> dict[int, str]:
    """Signal each rank's worker and return ``rank -> its stack dump``.

    A rank whose worker is gone, or does not catch the signal (not started by
    ``accel launch``, or still starting), maps to a one-line explanation instead.
    ``pids`` from ``workers.json`` (a file anyone may edit) are signalled only with the
    proof of :func:`belongs_to`; ``trusted``: the launcher's own, which it started.
    """
    pending: dict[int, tuple[Path, int]] = {}
    out: dict[int, str] = {}
    for rank, pid in sorted(pids.items()):
        path = stacks_file(run_dir, rank)
        offset = _size(path)
        if not catches(pid):
            out[rank] = f"(pid {pid} is gone or does not dump stacks on SIGUSR1)"
            continue
        if not trusted and not belongs_to(pid, run_dir, launcher_pid):
            out[rank] = f"(pid {pid} is not a worker of this run; not signalled)"
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
    """Append each dump to ``rank-N.log`` under a marked header (one write per rank).

    Best effort, like every write here: a log that is not a regular file (a link, a
    FIFO, a device put in its place) or cannot be written is skipped, never followed
    or waited on; the dumps are still in ``stacks/`` and in what the caller shows.
    """
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    for rank, text in stacks.items():
        block = f"===== accel: {title} at {stamp} =====\n{text}\n===== end of stacks =====\n"
        fd = _open_log(run_dir / rank_log(rank))
        if fd is None:
            continue
        try:
            with contextlib.suppress(OSError):
                data = ("" if _ends_a_line(fd) else "\n") + block
                os.write(fd, data.encode("utf-8", "replace"))
        finally:
            os.close(fd)


def _open_log(log: Path) -> int | None:
    """A descriptor appending to the regular file ``log`` (created if missing), or None."""
    try:
        if not stat.S_ISREG(os.lstat(log).st_mode):
            return None  # not even opened: opening some devices has effects of its own
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:  # read-write: the last byte says whether a line is open
        return open_regular_append(log, readable=True, mode=0o666)
    except (OSError, ValueError):  # a link swapped in since, a FIFO: DamagedFile
        return None


def _ends_a_line(fd: int) -> bool:
    """Whether the file open at ``fd`` (a regular file: see :func:`_open_log`) ends with
    a newline (a progress bar may have left its line open)."""
    try:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"
    except OSError:
        return True
