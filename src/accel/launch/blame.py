"""Who is to blame when an attempt goes wrong: one pure decision over what each rank did.

Every report of a failure (the console, ``run.json``, ``accel runs show``, the restart
message) comes from :func:`blame`, from the same recorded events:

- a rank *failed* on its own when it raised, exited non-zero or died of a signal
  **before** accel began stopping the workers; the earliest of them is the failing
  rank (``failed``), the later ones ``also failed`` (their error is usually the
  consequence: a peer's connection reset). An error that only reports a dead peer
  ("Connection closed by peer") yields to a rank that failed of its own cause within
  a few seconds after it;
- a rank that ended after accel began stopping the workers was ``stopped`` by accel,
  whatever its exit code (SIGTERM, or SIGKILL after the grace period);
- after a hang, the ranks whose main-thread stack is not inside a collective (a
  ``torch.distributed`` call, or accel's own: the checkpoint arrival wait,
  ``wait_for_everyone``) are ``stuck`` (the others wait for them); when the stacks do
  not tell, the ranks that went quiet first are (a rank that never printed is quiet
  since its start);
- a run stopped because a metric diverged names the rank that logged it.

When each rank failed comes from the launcher's exit watch (the process's end, to the
millisecond) and from the worker bootstrap (when the uncaught exception was recorded,
or the script exited non-zero: a rank still in its exit handlers when accel stops it
has failed all the same); torch's own coarse poll time is the fallback for records that
lack both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from accel.runs.failures import (
    ALSO_FAILED,
    BY_DIVERGENCE,
    BY_FAILURE,
    BY_HANG,
    BY_SIGNAL,
    EXITED,
    FAILED,
    STOPPED,
    STUCK,
    RankFailure,
    Stop,
    Verdict,
    stuck_line,
)

__all__ = ["HangClue", "blame", "describe_stuck", "in_collective", "stuck_ranks"]

_STOP_REASONS: dict[str, str] = {
    BY_FAILURE: "after rank {first} failed",
    BY_HANG: "after the hang",
    BY_SIGNAL: "on the launcher's signal",
    BY_DIVERGENCE: "after a metric diverged",
}


@dataclass(frozen=True)
class HangClue:
    """What the hang watch saw: each rank's stack dump and seconds of quiet."""

    stacks: Mapping[int, str] = field(default_factory=dict)
    quiet: Mapping[int, float] = field(default_factory=dict)


def blame(
    failures: Iterable[RankFailure], stop: Stop | None = None, hang: HangClue | None = None
) -> Verdict:
    """Decide each rank's fate (see the module docstring); the one place that does."""
    ends = sorted(failures, key=lambda f: f.rank)
    own = [f for f in ends if _own_failure(f, stop)]
    own_ranks = {f.rank for f in own}
    first = min(own, key=_order) if own else None
    culprits: set[int] = set()
    if first is None and stop is not None:
        culprits = set(stop.culprits) or (stuck_ranks(hang) if stop.reason == BY_HANG else set())
    why = _why_stopped(stop, first)
    out = []
    for f in ends:
        if first is not None and f.rank == first.rank:
            fate = FAILED
        elif f.rank in own_ranks:
            fate = ALSO_FAILED
        elif f.rank in culprits:
            fate = STUCK if stop is not None and stop.reason == BY_HANG else FAILED
        elif f.exitcode == 0 and (stop is None or f.failed_at < stop.at):
            fate = EXITED
        else:
            fate = STOPPED
        out.append(_with_fate(f, fate, why, stop, hang))
    return Verdict(tuple(out))


def _with_fate(
    f: RankFailure, fate: str, why: str, stop: Stop | None, hang: HangClue | None
) -> RankFailure:
    """``f`` with its fate, and what explains it: the stack of a hung rank, the metric."""
    stack = hang.stacks.get(f.rank) if hang is not None else None
    if fate == STUCK:
        message = _stuck_message(f.rank, hang)
        return replace(f, fate=fate, type="Hang", message=message, traceback=stack, stopped=why)
    if fate == FAILED and stop is not None and stop.reason == BY_DIVERGENCE and f.type is None:
        return replace(f, fate=fate, type="Diverged", message=stop.detail)
    changed = replace(f, fate=fate, stopped=why if fate == STOPPED else None)
    return replace(changed, traceback=stack) if stack and not f.traceback else changed


def _stuck_message(rank: int, hang: HangClue | None) -> str:
    stack = hang.stacks.get(rank, "") if hang is not None else ""
    if stack and not in_collective(stack):
        where = stuck_frame(stack)
        return f"stuck in {where}, not in a collective" if where else "stuck outside a collective"
    quiet = hang.quiet.get(rank) if hang is not None else None
    seconds = f" ({quiet:.0f}s)" if quiet is not None else ""
    return f"stuck: the first to go quiet{seconds}"


# Errors that report a peer's end rather than a cause of their own. A rank raising one is
# the first to fail only if no other rank failed on its own within SYMPTOM_WINDOW after:
# the dead peer's exit can be seen a little late when the launcher is starved of CPU.
_PEER_SYMPTOM = re.compile(
    r"connection (closed|reset) by peer|broken pipe|remote process exited"
    r"|communicator was aborted|failed to recv, got 0 bytes|peer closed",
    re.IGNORECASE,
)
SYMPTOM_WINDOW = 5.0


def peer_symptom(f: RankFailure) -> bool:
    """Whether ``f``'s error is what a rank sees when a peer dies under it."""
    if f.type == "DistNetworkError":
        return True
    return bool(f.message and _PEER_SYMPTOM.search(f.message))


def _order(f: RankFailure) -> tuple[float, int]:
    return f.failed_at + (SYMPTOM_WINDOW if peer_symptom(f) else 0.0), f.rank


def _own_failure(f: RankFailure, stop: Stop | None) -> bool:
    """Ended badly before accel began stopping anything (so not by accel's hand)."""
    if f.exitcode == 0 and f.type is None:
        return False
    if f.exitcode is None and f.died_at is None and f.type is None:
        return False  # never seen ending: still running when accel stopped it
    return stop is None or f.failed_at < stop.at


def _why_stopped(stop: Stop | None, first: RankFailure | None) -> str:
    reason = stop.reason if stop is not None else BY_FAILURE
    text = _STOP_REASONS.get(reason, _STOP_REASONS[BY_FAILURE])
    if reason == BY_FAILURE and first is None:
        return "after another rank failed"
    return text.format(first=first.rank if first is not None else "?")


# -- hangs -----------------------------------------------------------------------------

# Frames of a rank waiting for its peers: a call into torch.distributed or DDP (a
# module body there is an import, not a wait), and accel's own collectives: the
# checkpoint collectives' arrival wait (it polls the job's store, not torch.distributed)
# and ``Accelerator.wait_for_everyone``.
_COLLECTIVE_FRAME = re.compile(
    r'File "[^"]*[/\\]torch[/\\](distributed|nn[/\\]parallel[/\\]distributed)[^"]*", '
    r"line \d+ in (?!<module>)"
    r'|File "[^"]*[/\\]accel[/\\]store[/\\]collectives\.py", line \d+ in (arrive|_meet|_wait)\b'
    r'|File "[^"]*[/\\]accel[/\\]accelerator[/\\][^"]*\.py", line \d+ in wait_for_everyone\b'
)
_BOOTSTRAP_FILE = re.compile(r"[/\\]accel[/\\]launch[/\\]_bootstrap\.py")


def in_collective(stack: str) -> bool:
    """Whether a faulthandler dump shows the worker's main thread inside a collective.

    The main thread is the one that runs the accel bootstrap (every worker starts
    there); without it (another launcher), any thread in a collective counts.
    """
    threads = _threads(stack)
    main = [t for t in threads if any(_BOOTSTRAP_FILE.search(line) for line in t)]
    return any(_COLLECTIVE_FRAME.search(line) for t in (main or threads) for line in t)


def _threads(stack: str) -> list[list[str]]:
    threads: list[list[str]] = []
    for line in stack.splitlines():
        if line.startswith(("Thread ", "Current thread ")) or not threads:
            threads.append([])
        threads[-1].append(line)
    return threads


def stuck_ranks(hang: HangClue | None) -> set[int]:
    """The ranks a hang is blamed on: not in a collective, else quiet the longest.

    Every rank of the clue counts (its stacks and its quiet times alike): a rank that
    never printed is quiet since its start (:func:`accel.hang.detect.check_hang`), and
    one with a stack but no quiet time is no reason to blame the others.
    """
    if hang is None:
        return set()
    dumped = {r: s for r, s in hang.stacks.items() if "File " in s}
    outside = {r for r, s in dumped.items() if not in_collective(s)}
    if outside and len(outside) < len(set(hang.quiet) | set(dumped)):
        return outside
    if not hang.quiet:
        return outside
    longest = max(hang.quiet.values())
    return {r for r, q in hang.quiet.items() if q >= longest - 0.5}


def describe_stuck(hang: HangClue) -> str | None:
    """Who a hang is blamed on, for the moment it is detected: ``rank 1 is stuck in ...``."""
    ranks = sorted(stuck_ranks(hang))
    if not ranks or len(ranks) == len(hang.stacks or hang.quiet):
        return None  # every rank alike: nobody to single out
    return stuck_line([(r, _stuck_message(r, hang)) for r in ranks])


def stuck_frame(stack: str) -> str | None:
    """The innermost function of the main thread ("in stuck_in_sleep"), for messages."""
    threads = _threads(stack)
    main = [t for t in threads if any(_BOOTSTRAP_FILE.search(line) for line in t)]
    for thread in main or threads:
        for line in thread:
            match = re.search(r'File "([^"]+)", line \d+ in (\S+)', line)
            if match:
                return f"{match.group(2)} ({match.group(1).rsplit('/', 1)[-1]})"
    return None
