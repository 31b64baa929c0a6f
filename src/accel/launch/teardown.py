"""A worker whose script has returned has finished, whatever torch's teardown does next.

torch's gloo sometimes leaves a rank hung forever in interpreter teardown, or aborts it
("terminate called without an active exception", SIGABRT or SIGSEGV), after the script
finished: under every launcher. accel's worker bootstrap notes when the script returned,
with its exit code (:func:`accel.launch._bootstrap.returned_path`), and again once the
exit handlers have run. From then on:

- the rank's result is the script's own (0 when it returned, the ``sys.exit`` code), and
  one that exited non-zero failed when its script exited (``on_returned`` tells the
  launcher, for blame): a death by a signal or another exit code in teardown does not
  fail the run;
- a rank still alive ``TEARDOWN_GRACE`` seconds after its exit handlers ran (or
  ``handlers_grace``, the launch's stop grace period, more after the script returned
  while a handler still runs) is killed, with the processes of its group; never while
  a background checkpoint save runs in it (the interpreter, or ``Accelerator`` at exit,
  waits for it; it says so: :func:`accel.store.async_save.saving_note`): that is the
  script's own work;
- either is reported once, as a :class:`Teardown` (run.json, ``accel runs show``); an end
  by the signal accel stops the workers with (or SIGKILL after the grace period), once
  it began stopping them, is accel's stop, not the rank's teardown: not reported.

:class:`TeardownJudge` is the one place that decides; torch reads each worker's exit
status through it (see :func:`accel.launch._torch_compat.tolerate_teardown`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel.launch._bootstrap import returned_path
from accel.store.async_save import saving_note

__all__ = ["TEARDOWN_GRACE", "Returned", "Teardown", "TeardownJudge", "read_returned"]

TEARDOWN_GRACE = 5.0  # seconds a worker gets after its exit handlers to end by itself
HUNG, ENDED = "hung", "ended"


@dataclass(frozen=True)
class Returned:
    """What the bootstrap noted: the script's exit code, in process ``pid``."""

    code: int
    pid: int
    returned_at: float
    handlers_done_at: float | None = None
    saving: bool = False  # a background checkpoint save still runs in it
    message: str | None = None  # what its sys.exit said, when a text (one line, bounded)


def read_returned(error_file: str) -> Returned | None:
    """The worker's note that its script returned; None when it has not (or is unreadable)."""
    try:
        with open(returned_path(error_file), encoding="utf-8") as fh:
            data = json.load(fh)
        done, message = data.get("handlers_done_at"), data.get("message")
        return Returned(
            code=int(data["code"]),
            pid=int(data["pid"]),
            returned_at=float(data["returned_at"]),
            handlers_done_at=float(done) if done is not None else None,
            saving=os.path.exists(saving_note(error_file)),
            message=message if isinstance(message, str) else None,
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


@dataclass(frozen=True)
class Teardown:
    """Rank ``rank`` finished (``code``), then hung or ended otherwise (``exitcode``)."""

    rank: int
    what: str  # HUNG: accel ended it; ENDED: it died or exited by itself
    code: int
    exitcode: int
    seconds: float  # from the script's return to its end (hung: to accel's kill)

    @property
    def message(self) -> str:
        result = "finished" if self.code == 0 else f"finished with exit code {self.code}"
        if self.what == HUNG:
            return f"rank {self.rank} {result}; hung in teardown, ended after {self.seconds:.0f} s"
        return f"rank {self.rank} {result}; {_death(self.exitcode)} in teardown"

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "what": self.what,
            "code": self.code,
            "exitcode": self.exitcode,
            "seconds": round(self.seconds, 3),
            "message": self.message,
        }


def _death(exitcode: int) -> str:
    if exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"died of {signal.Signals(-exitcode).name}"
        return f"died of signal {-exitcode}"
    return f"exited with code {exitcode}"


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # a worker leads its own group (torch, preload)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class TeardownJudge:
    """The exit status torch sees for each worker of one attempt (see the module doc)."""

    def __init__(
        self,
        handlers_grace: float,
        on_teardown: Callable[[Teardown], None],
        on_returned: Callable[[int, Returned], None] = lambda rank, returned: None,
        *,
        grace: float = TEARDOWN_GRACE,
        clock: Callable[[], float] = time.time,
        kill: Callable[[int], None] = _kill_group,
    ) -> None:
        self._handlers_grace = handlers_grace
        self._grace = grace
        self._on_teardown = on_teardown
        self._on_returned = on_returned
        self._clock = clock
        self._kill = kill
        self._killed: dict[int, float] = {}  # rank -> seconds from its return to the kill
        self._told: set[int] = set()
        self._seen: set[int] = set()  # ranks whose return was passed to on_returned
        self._stop_codes: set[int] = set()  # exit codes of accel's stop, once it began

    def stopping(self, death_sig: signal.Signals | None) -> None:
        """accel begins stopping the workers with ``death_sig`` (None: torch's SIGTERM)."""
        self._stop_codes = {-(death_sig or signal.SIGTERM), -signal.SIGKILL}

    def exitcode(self, rank: int, error_file: str, polled: int | None) -> int | None:
        """What ``Popen.poll()`` of ``rank``'s worker should say, given what it said."""
        returned = read_returned(error_file)
        if returned is None:
            return polled
        if rank not in self._seen:
            self._seen.add(rank)
            self._on_returned(rank, returned)
        now = self._clock()
        if polled is None:
            deadline = self.deadline(returned)
            if rank not in self._killed and now >= deadline:
                self._killed[rank] = deadline - returned.returned_at
                self._kill(returned.pid)
            return None
        if polled != returned.code and rank not in self._told:
            self._told.add(rank)
            if rank not in self._killed and polled in self._stop_codes:
                return returned.code  # accel's own stop reached it while it was exiting
            what = HUNG if rank in self._killed else ENDED
            seconds = self._killed.get(rank, max(0.0, now - returned.returned_at))
            self._on_teardown(Teardown(rank, what, returned.code, polled, seconds))
        return returned.code

    def deadline(self, returned: Returned) -> float:
        """When a worker whose script returned is ended if it is still there."""
        if returned.saving:
            return float("inf")
        if returned.handlers_done_at is None:
            return returned.returned_at + self._handlers_grace + self._grace
        return returned.handlers_done_at + self._grace
