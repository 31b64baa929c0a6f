"""``launch.preload``: workers forked from a template that has imported torch already.

Under exec every worker pays for its own ``import torch`` (1.5-2 s here); the launcher
pays once more. With preload the launcher starts one *template* process at the start
of the run (``_template.py``), which imports torch and ``launch.preload_modules`` while
the launcher does its own start-up. torch's agent is left untouched: it still starts
each worker with ``subprocess.Popen``, but the program it starts is a shim
(``_preload_shim.py``) that asks the template for a fork of itself, then relays
signals to it and exits the way the worker did. See those two files for the protocol.

Why a separate process and not a fork of the launcher: the launcher holds the run's
lock, its temporary folder (whose finaliser a forked worker would run at exit), log
pipes and atexit handlers that a worker must never inherit; a process exec'd for the
purpose holds nothing but its socket. The CLI starts it (:func:`start_early`) before
it imports torch itself to count GPUs, so the two imports overlap; the runner adopts
it (:func:`template`), or starts one when the CLI could not.

What a preloaded worker sees differently from an exec'd one (docs/commands/launch.md):
its parent is the template, not the launcher, and ``ps`` shows the template's command
line; ``sys.modules`` holds torch (and the
listed modules) before the script runs; string hashing shares the template's seed
(``PYTHONHASHSEED``) across ranks; ``gc.get_freeze_count()`` is not 0. Random numbers
are each worker's own (``_template._reseed``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from accel._fs import read_regular
from accel.launch._host import HANDLED_SIGNALS
from accel.launch.plan import BOOTSTRAP, EXEC, LaunchPlan

TEMPLATE = Path(__file__).with_name("_template.py")
SHIM = Path(__file__).with_name("_preload_shim.py")
SOCKET = "preload.sock"
PIDS = "pids"  # the template writes pids/<shim pid> = worker pid (_template.py)


def shim_args(worker_args: tuple[str, ...], socket_path: Path) -> tuple[str, ...]:
    """The bootstrap's command line turned into the shim's (same interpreter flags)."""
    flags, rest = worker_args[:1], worker_args[2:]
    if worker_args[1:2] != (str(BOOTSTRAP),):
        raise ValueError(f"not a bootstrap command line: {worker_args!r}")
    return (*flags, str(SHIM), str(socket_path), *rest)


def worker_pids(plan: LaunchPlan, pids: Mapping[int, int]) -> dict[int, int]:
    """``rank -> pid`` of the processes that run the ranks' code: under preload the
    forked workers rather than their shims (telemetry reads their /proc), as far as
    the template has said; the shims' pids otherwise."""
    if plan.worker_args[1:2] != (str(SHIM),):
        return dict(pids)
    folder = Path(plan.worker_args[2]).parent / PIDS
    return {rank: _read_pid(folder / str(pid)) or pid for rank, pid in pids.items()}


def _read_pid(path: Path) -> int | None:
    try:
        return int(read_regular(path, 32))  # a pid: a few digits, never a FIFO's wait
    except (OSError, ValueError):
        return None


def first_path(cwd: Path, args: tuple[str, ...]) -> str:
    """``sys.path[0]`` of the workers, given the bootstrap's arguments."""
    if not args or args[0] in ("-m", EXEC):
        return str(cwd)
    return os.path.dirname(os.path.realpath(cwd / args[0]))


@dataclass
class _Started:
    proc: subprocess.Popen[bytes]
    socket: Path
    folder: Path | None  # a private folder of its own, removed with it (early starts)


_early: dict[str, _Started] = {}  # run id -> the template start_early started


def start_early(plan: LaunchPlan) -> None:
    """Start the run's template from a provisional plan, before the launcher imports torch.

    The CLI imports torch to count GPUs before its plan is final; started here, the
    template's import overlaps that one. The provisional plan differs from the final
    one only in what depends on the GPU count (``-n auto``: its ``OMP_NUM_THREADS``,
    which the template gives each worker's torch again, see ``_template.py``).
    """
    if not plan.preload or plan.worker_args[2:3] == (EXEC,) or plan.run_id in _early:
        return
    folder = _private_folder(None)
    _early[plan.run_id] = _Started(_spawn(plan, folder / SOCKET), folder / SOCKET, folder)
    atexit.register(discard_early, plan.run_id)  # the run never started (a refused lease...)


# A Unix socket's path must fit sun_path: 108 bytes on Linux, 104 on macOS, the final
# NUL included. A deep TMPDIR (a CI job's, a test's) passes that easily.
_SOCKET_PATH_MAX = 103


def _fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= _SOCKET_PATH_MAX


def _private_folder(parent: str | None) -> Path:
    """A new folder of mode 0700 for the socket, in the temporary folder; under /tmp when
    the temporary folder's path is too long for a socket inside it."""
    folder = Path(tempfile.mkdtemp(prefix="accel-preload-", dir=parent))
    if parent is None and not _fits(folder / SOCKET) and os.path.isdir("/tmp"):
        os.rmdir(folder)
        return _private_folder("/tmp")
    return folder


def discard_early(run_id: str) -> None:
    """End the template :func:`start_early` started for ``run_id``, if any: its run
    will not start."""
    started = _early.pop(run_id, None)
    if started is not None:
        _end(started)


@contextlib.contextmanager
def template(
    plan: LaunchPlan, scratch: Path, own: Callable[[Path], None] = lambda _: None
) -> Iterator[LaunchPlan]:
    """The run's template (started early or now); yield the plan whose workers ask it for
    a fork. ``--no-python`` workers exec a program at once: nothing to preload.
    ``own`` is told of the template's private folder (to remove if the launcher dies)."""
    if plan.worker_args[2:3] == (EXEC,):
        yield plan
        return
    started = _early.pop(plan.run_id, None)
    if started is None:
        folder = None if _fits(scratch / SOCKET) else _private_folder(None)
        path = (folder or scratch) / SOCKET
        started = _Started(_spawn(plan, path), path, folder)
    if started.folder is not None:
        own(started.folder)
    try:
        yield replace(plan, worker_args=shim_args(plan.worker_args, started.socket))
    finally:
        _end(started)


def _end(started: _Started) -> None:
    started.proc.kill()
    started.proc.wait()
    if started.folder is not None:
        shutil.rmtree(started.folder, ignore_errors=True)


def _spawn(plan: LaunchPlan, path: Path) -> subprocess.Popen[bytes]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        listener.listen(max(64, plan.nproc_per_node))
        return _start(plan, listener.fileno())
    finally:
        listener.close()  # the template holds it now


def _start(plan: LaunchPlan, fd: int) -> subprocess.Popen[bytes]:
    path0 = first_path(plan.cwd, plan.worker_args[2:])
    command = [
        plan.entrypoint,
        *plan.worker_args[:1],
        str(TEMPLATE),
        str(fd),
        str(os.getpid()),
        path0,
        ",".join(sig.name for sig in HANDLED_SIGNALS),  # for the workers to reset
        # whether other workers may be forked later (restarts): what to preload for them
        "restarts" if plan.max_restarts > 0 or plan.elastic else "once",
        *plan.preload_modules,
    ]
    return subprocess.Popen(
        command,
        env={**os.environ, **plan.worker_env},
        cwd=plan.cwd,
        pass_fds=(fd,),
        stdin=subprocess.DEVNULL,
        stdout=2,  # a preloaded module that prints at import: on the console, once
        start_new_session=True,  # a Ctrl-C is the launcher's to handle, as for workers
    )
