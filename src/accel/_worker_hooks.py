"""What every worker of ``accel launch`` installs without importing accel: stack dumps on
SIGUSR1 and at a fatal signal, heartbeats, and the names of the per-rank files they write.

Standard library only, and only modules the bootstrap has already imported (no
``typing``, ``pathlib`` or ``dataclasses``): the launcher's worker bootstrap loads this
file by path, without importing accel, so a worker starts as fast as a bare interpreter.
That is why this ground-floor module, not :mod:`accel.layout`, spells ``rank-N`` and the
``stacks/`` and ``heartbeats/`` folders: the layout imports them from here, so every
per-rank name still has one spelling. :mod:`accel.hang` gives the same functions.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from collections.abc import Mapping

STACK_SIGNAL = signal.SIGUSR1
RUN_DIR_ENV = "ACCEL_RUN_DIR"
STACKS_DIR = "stacks"  # rank-N.txt (dumped on SIGUSR1), rank-N.crash.txt (fatal signals)
HEARTBEATS_DIR = "heartbeats"  # rank-N, touched by each worker
RANK_PREFIX = "rank-"
STACK_SUFFIX = ".txt"
CRASH_SUFFIX = ".crash.txt"

_handler_file: object = None  # faulthandler writes to its fd: keep the file open
_crash_file: object = None


def rank_of(env: Mapping[str, str]) -> str:
    rank = env.get("RANK", "0")
    return rank if rank.isdigit() else "0"


def rank_name(rank: int | str, suffix: str = "") -> str:
    """``rank-N`` and a suffix: the one spelling of every per-rank file and folder, of a
    run (``rank-3.log``, ``stacks/rank-3.crash.txt``, ``heartbeats/rank-3``) and of a
    checkpoint (``rank-3.tensors``)."""
    return f"{RANK_PREFIX}{rank}{suffix}"


def stacks_path(run_dir: str, rank: int | str) -> str:
    return os.path.join(run_dir, STACKS_DIR, rank_name(rank, STACK_SUFFIX))


def crash_path(run_dir: str, rank: int | str) -> str:
    """Where a worker's Python stack goes when it dies of SIGSEGV, SIGABRT, SIGBUS, ..."""
    return os.path.join(run_dir, STACKS_DIR, rank_name(rank, CRASH_SUFFIX))


def heartbeat_path(run_dir: str, rank: int | str) -> str:
    return os.path.join(run_dir, HEARTBEATS_DIR, rank_name(rank))


def install_stack_dump_handler(env: Mapping[str, str] | None = None) -> str | None:
    """Dump every thread's stack on ``SIGUSR1``; returns the file it goes to.

    Into ``$ACCEL_RUN_DIR/stacks/rank-$RANK.txt`` under ``accel launch``; elsewhere to
    stderr (None is returned). Never raises: a worker must start even when it fails.
    """
    global _handler_file
    env = os.environ if env is None else env
    run_dir = env.get(RUN_DIR_ENV)
    path = stacks_path(run_dir, rank_of(env)) if run_dir else None
    try:
        target = sys.stderr
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # 0640 like every run log (stdlib only: this file is loaded in every worker)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
            handle = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
            _handler_file = target = handle
        faulthandler.register(STACK_SIGNAL, file=target, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError, AttributeError):
        return None
    if run_dir:
        _install_crash_dump(crash_path(run_dir, rank_of(env)))
    return path


def _install_crash_dump(path: str) -> None:
    """On a fatal signal, write the Python stacks to ``path`` before dying of it.

    faulthandler re-raises the signal afterwards, so the exit status is unchanged.
    The file is written at the instant of the crash, before a core dump delays the
    process's end: its time orders the crash before the errors it caused in peers.
    Truncated at each start, so it only ever holds this attempt's crash.
    """
    global _crash_file
    try:
        flags = os.O_WRONLY | os.O_TRUNC | os.O_CREAT | os.O_CLOEXEC
        handle = open(os.open(path, flags, 0o640), "w", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(file=handle, all_threads=True)
    except (OSError, ValueError, RuntimeError, AttributeError):
        return
    _crash_file = handle


def heartbeat(env: Mapping[str, str] | None = None) -> None:
    """Tell a hang watch this rank is alive (cheap: one ``utime``). No-op outside a run."""
    env = os.environ if env is None else env
    run_dir = env.get(RUN_DIR_ENV)
    if not run_dir:
        return
    path = heartbeat_path(run_dir, rank_of(env))
    try:
        os.utime(path)
    except FileNotFoundError:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a"):
                pass
        except OSError:
            return
    except OSError:
        return
