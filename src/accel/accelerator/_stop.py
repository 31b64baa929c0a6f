"""A stop asked of the job (preemption): SIGTERM, which the launcher sends the workers
when it is itself sent SIGTERM or SLURM's early warning (``--signal=USR1@90``).

A scheduler that takes the machines back (SLURM's KillWait, Kubernetes'
terminationGracePeriodSeconds: 30 s by default) sends SIGTERM, then SIGKILL. Python's
default for SIGTERM ends the process at once, and the steps since the last checkpoint
are lost. Here the signal is noted instead, once the script has shown it listens
(``Accelerator.should_stop()`` called at least once): the script checks at the end of
a step, every rank agrees on it (one all-reduce), saves that step, and returns. A script
that never asks is ended by the signal as before, not kept alive until SIGKILL.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

#: The signals that ask a worker to stop. Not SIGUSR1: under ``accel launch`` it asks a
#: worker for its stacks (accel.hang.worker); the launcher turns SLURM's SIGUSR1 into
#: SIGTERM for the workers.
STOP_SIGNALS = (signal.SIGTERM,)


class StopWatch:
    """Notes the first stop signal in ``signum`` once the script listens (:meth:`listen`).

    Its handler goes in at the first :meth:`listen` on the main thread (Python allows no
    handler elsewhere), not before: until the script asks, a stop signal does what it
    does without accel, and SIGTERM's default ends the process in the kernel, at once. A
    Python handler runs only between two bytecodes, when the C++ call the main thread is
    in returns (a backward: a tenth of a second): installed from the start, it held every
    rank that the launcher stops after a peer's crash 0.04 s longer (issue 28).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.listening = False  # the script called should_stop(): it will save and return
        self._previous: dict[int, Any] = {}

    def listen(self) -> None:
        """From now on a stop signal is noted, not the process's end."""
        self.listening = True
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            try:
                if signal.getsignal(sig) == self._note:
                    signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
            except ValueError:  # not the main thread any more (interpreter exit)
                pass
        self._previous.clear()


def agreed(asked: bool, world_size: int, on: Any) -> bool:
    """Whether any rank was asked to stop: the same answer on every rank (a collective
    when there is more than one), so they all save the same step and return together."""
    if world_size <= 1:
        return asked
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if asked else 0], dtype=torch.int32, device=on)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
