"""Let gloo's worker threads finish what they hold before the interpreter finishes.

A gloo collective runs on one of the group's worker threads (``pt_gloo_runloop``). The
caller's ``wait()`` returns as soon as the work is marked complete; the worker then
runs the future's callbacks and drops its reference to the work and its tensors. For a
tensor that Python also holds, dropping that reference takes the GIL (torch's PyObject
preservation, ``TensorImpl::decref_pyobject``), and a Python callback (a DDP comm hook,
``Future.then``) runs under it. ``destroy_process_group()`` does not stop the workers
while anything else still holds the group, as DDP does: they outlive ``end()``.

If the interpreter has begun to finalize when such a worker asks for the GIL, CPython
(before 3.14) ends that thread with ``pthread_exit``; its forced unwinding crosses a
``noexcept`` destructor, and the process aborts: ``terminate called without an active
exception``, exit code -6, after a run that had finished (stop 61's CI: one rank of a
DDP resume). A starved worker thread on a busy machine is enough: two-rank runs of
all_reduce, barrier, destroy beside three CPU hogs aborted 4 times in 112, and 0 in
112 with this wait (interleaved, one session). torch's own atexit fix for it was
abandoned (pytorch#179291).

:func:`wait_for_gloo_workers` waits, with the GIL released, until every worker thread
of this process is parked on its empty queue: in an untimed ``FUTEX_WAIT_BITSET``, which
is where ``std::condition_variable::wait`` sleeps. A worker waiting for the GIL waits
with a timeout, one blocked on the queue's mutex with ``FUTEX_WAIT``, one running or in
any other call is busy. Read from ``/proc/self/task``: Linux only, elsewhere (or where
``/proc`` says nothing) there is nothing to wait for. Bounded: a worker still inside a
collective of another group the script left running gets :data:`LIMIT` seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

WORKER = b"pt_gloo_runloop"  # the name torch gives them; threads named otherwise are not waited for
FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}  # the syscall's number
FUTEX_WAIT_BITSET = 9  # the op pthread_cond_wait uses; FUTEX_WAIT (0) is a mutex's
FUTEX_CMD_MASK = 0x7F  # without FUTEX_PRIVATE_FLAG (128) and FUTEX_CLOCK_REALTIME (256)
LIMIT = 5.0  # seconds for a worker that is still busy: a collective that never ends


def parked(syscall: str, futex: int) -> bool:
    """Whether ``/proc/<pid>/task/<tid>/syscall``'s line is a thread asleep in an
    untimed condition-variable wait: ``NR arg0 arg1 ...`` with NR the futex call, arg1
    (the op) a WAIT_BITSET and arg3 (the timeout) NULL."""
    fields = syscall.split()
    if len(fields) < 5 or fields[0] != str(futex):
        return False
    try:
        op, timeout = int(fields[2], 16), int(fields[4], 16)
    except ValueError:
        return False
    return op & FUTEX_CMD_MASK == FUTEX_WAIT_BITSET and timeout == 0


def threads(named: Callable[[bytes], bool]) -> dict[str, bytes] | None:
    """This process's threads whose name (any bytes: a name need not be text) passes
    ``named``, by thread id; None where ``/proc`` cannot say."""
    found = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as comm:
                name = comm.read().strip()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        except OSError:
            return None
        if named(name):
            found[tid] = name
    return found


def _workers() -> list[str] | None:
    """The syscall line of each gloo worker thread of this process; None where
    ``/proc`` cannot say."""
    workers = threads(lambda name: name == WORKER)
    if workers is None:
        return None
    lines = []
    for tid in workers:
        try:
            with open(f"/proc/self/task/{tid}/syscall", "rb") as call:
                lines.append(call.read().decode("ascii", "replace"))
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        except OSError:  # no access to a thread's syscall (ptrace rules): cannot tell
            return None
    return lines


def wait_for_gloo_workers(limit: float = LIMIT) -> bool:
    """Return once every gloo worker thread of this process is idle (True), or after
    ``limit`` seconds (False). Sleeps between looks, so a worker waiting for the GIL
    gets it. Never raises."""
    futex = FUTEX.get(os.uname().machine.lower()) if hasattr(os, "uname") else None
    if futex is None:
        return True
    deadline = time.monotonic() + limit
    pause = 0.0005
    while True:
        lines = _workers()
        if lines is None or all(parked(line, futex) for line in lines):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
