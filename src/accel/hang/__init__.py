"""Hang detection and on-demand stack dumps of the workers of a run.

**Stack dumps.** Every worker started by ``accel launch`` calls
:func:`install_stack_dump_handler` from its bootstrap: :mod:`faulthandler` then writes
the Python stack of every thread to ``<run>/stacks/rank-<N>.txt`` when the worker
receives ``SIGUSR1``. The handler runs in C inside the signal handler, so it answers
even when the main thread is stuck in native code. :func:`dump_stacks` signals the
workers (only those that catch the signal: an uncaught SIGUSR1 would kill them) and
returns what each one wrote.

**Hangs.** A run is hung when *no* rank has printed a line, logged a metric or touched
its heartbeat (:func:`heartbeat`) for ``launch.hang_timeout``: :func:`check_hang`
decides that from the last activity times (pure); :class:`HangWatch` is the launcher
thread that gathers them, dumps the stacks once per quiet period and hands the event
to the launcher.

The worker side lives in :mod:`accel.hang.worker`, standard library only, so the
bootstrap can load that file by path without importing accel.
"""

from __future__ import annotations

from accel.hang.detect import METRICS_FILE, HangVerdict, check_hang, heartbeat_file, last_activity
from accel.hang.dump import (
    WORKERS_FILE,
    append_to_rank_logs,
    catches,
    dump_stacks,
    read_crash,
    read_workers,
    stacks_file,
    write_workers,
)
from accel.hang.watch import HangEvent, HangWatch
from accel.hang.worker import (
    RUN_DIR_ENV,
    STACK_SIGNAL,
    heartbeat,
    install_stack_dump_handler,
)

__all__ = [
    "METRICS_FILE",
    "RUN_DIR_ENV",
    "STACK_SIGNAL",
    "WORKERS_FILE",
    "HangEvent",
    "HangVerdict",
    "HangWatch",
    "append_to_rank_logs",
    "catches",
    "check_hang",
    "dump_stacks",
    "heartbeat",
    "heartbeat_file",
    "install_stack_dump_handler",
    "last_activity",
    "read_crash",
    "read_workers",
    "stacks_file",
    "write_workers",
]
