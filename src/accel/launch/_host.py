"""The launcher process during a run: its signals, its file descriptor 2, torch's
loggers, and the facts about it that the run record keeps."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from accel._fs import open_private_append

__all__ = [
    "HANDLED_SIGNALS",
    "Signalled",
    "early_warning_stops",
    "facts",
    "native_stderr_to",
    "quiet_torch_logs",
    "signals_while_stopping",
]

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# The pre-timeout signals schedulers are told to send before the end: SLURM's
# --signal=USR1@90, and USR2 (submitit's default); each stops the job as SIGTERM does
# (USR2 had ended the launcher outright, its default action: no save, run "crashed").
EARLY_WARNINGS = (signal.SIGUSR1, signal.SIGUSR2)


class Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


@contextlib.contextmanager
def native_stderr_to(path: Path) -> Iterator[None]:
    """Send what torch writes to file descriptor 2 into ``path`` for the run.

    torch's C++ side (c10d socket retries, store errors: stack traces of 40 frames)
    and its Python loggers write to the process's stderr, not through accel. The
    descriptor goes to the run's ``launcher.log``; accel's own lines keep the console
    through ``sys.stderr``, re-pointed at a copy of the original descriptor.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = os.dup(2)
    log = open_private_append(path)
    os.dup2(log, 2)
    os.close(log)
    console, previous = None, sys.stderr
    if _is_fd(previous, 2):
        console = os.fdopen(os.dup(saved), "w", buffering=1, errors="backslashreplace")
        sys.stderr = console
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        sys.stderr = previous
        os.dup2(saved, 2)
        os.close(saved)
        if console is not None:
            console.close()


def _is_fd(stream: Any, fd: int) -> bool:
    try:
        return bool(stream.fileno() == fd)
    except (AttributeError, OSError, ValueError):
        return False


def kill_groups(pids: Iterable[int]) -> None:
    """SIGKILL each worker's process group: normally the agent has stopped them already."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def signal_of(exc: BaseException) -> int | None:
    if isinstance(exc, Signalled):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    sigval = getattr(exc, "sigval", None)  # torch's SignalException
    return int(sigval) if sigval is not None else None


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Until torch installs its own handlers (they raise too), signals raise here."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Signalled(signum)

    with _handled_by(handler):
        yield


@contextlib.contextmanager
def early_warning_stops() -> Iterator[None]:
    """While the workers run, :data:`EARLY_WARNINGS` (SLURM's ``--signal=USR1@90``,
    submitit's USR2) stop the job as SIGTERM does, instead of ending the launcher (their
    default): the workers get SIGTERM and the grace period, time to save
    (``Accelerator.should_stop``).
    Raised as torch's own signal exception, so its agent stops the workers with SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        from torch.distributed.elastic.multiprocessing.api import SignalException

        raise SignalException(f"signal {signum}: stopping as on SIGTERM", signal.SIGTERM)

    previous = {sig: signal.signal(sig, handler) for sig in EARLY_WARNINGS}
    try:
        yield
    finally:
        for sig, handled in previous.items():
            signal.signal(sig, handled)


@contextlib.contextmanager
def signals_while_stopping(pids: Callable[[], Iterable[int]]) -> Iterator[list[int]]:
    """While accel waits for the workers to stop: a Ctrl-C SIGKILLs them at once.

    torch's handlers raise, and its agent then stops the workers all over again (SIGTERM,
    and the whole grace period once more). Here a SIGINT kills every worker's process
    group (``pids()``: the workers, each the leader of its own) and the wait ends; the
    other handled signals do not restart it. Yields the signals that came, in order: the
    caller raises the first once the workers are gone, unless it is already ending on
    one. Off the main thread (no handler can be set there) nothing changes.
    """
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        came.append(signum)
        if signum == signal.SIGINT:
            kill_groups(pids())

    with _handled_by(handler):
        yield came


@contextlib.contextmanager
def _handled_by(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    old = {sig: signal.signal(sig, handler) for sig in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def quiet_torch_logs() -> None:
    """The agent's own log lines repeat what accel reports; LOGLEVEL brings them back."""
    if os.environ.get("LOGLEVEL"):
        return
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def facts(cwd: Path) -> dict[str, Any]:
    import torch

    from accel import __version__

    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "git_commit": _git_commit(cwd),
        "accel_version": __version__,
        "torch_version": str(torch.__version__),
        "python_version": sys.version.split()[0],
    }


def _git_commit(cwd: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text else None
