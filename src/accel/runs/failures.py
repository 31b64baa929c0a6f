"""Each rank's fate in an attempt, as ``run.json`` records it: the failure report format.

:class:`RankFailure` is how one rank ended (and, once :func:`accel.launch.blame.blame`
decided, its *fate*); :class:`Verdict` every rank's fate in an attempt; :func:`headline`
the one line every report names the culprit with. :func:`recorded_verdict` reads them
back from any accel version's record. Pure: no IO, no torch.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Any

from accel._redact import scrub


class _Word(str, Enum):
    """A word run.json records: compares, hashes, prints and serializes as its text."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Fate(_Word):
    """How one rank ended an attempt, once the blame decided."""

    FAILED = "failed"
    ALSO_FAILED = "also failed"
    STOPPED = "stopped"
    STUCK = "stuck"
    EXITED = "exited"  # ended with code 0 before anything went wrong


class StopReason(_Word):
    """Why accel stopped the workers of an attempt."""

    BY_FAILURE = "failure"
    BY_HANG = "hang"
    BY_SIGNAL = "signal"
    BY_DIVERGENCE = "diverged"


FAILED, ALSO_FAILED, STOPPED, STUCK, EXITED = Fate
BY_FAILURE, BY_HANG, BY_SIGNAL, BY_DIVERGENCE = StopReason

TRACEBACK_TAIL = 60  # lines of a rank's traceback kept in run.json

_SIGNAL_REASONS = {
    signal.SIGKILL: "killed (SIGKILL): out of memory (the kernel's OOM killer) or killed by hand",
    signal.SIGABRT: "aborted (SIGABRT): a C++ assertion or abort() in a native library",
    signal.SIGSEGV: "segmentation fault (SIGSEGV) in native code",
    signal.SIGBUS: "bus error (SIGBUS): often /dev/shm is too small for data loaders",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGINT: "interrupted (SIGINT)",
    signal.SIGHUP: "hung up (SIGHUP)",
    signal.SIGFPE: "floating point exception (SIGFPE) in native code",
    signal.SIGPIPE: "broken pipe (SIGPIPE)",
}


def explain_exit(code: int | None) -> str:
    """What a worker's exit code means, for people (negative = killed by that signal)."""
    if code is None:
        return "did not exit"
    if code == 0:
        return "exited normally"
    if code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            return f"killed by signal {-code}"
        return _SIGNAL_REASONS.get(sig, f"killed by {sig.name}")
    if code > 128 and code - 128 in {s.value for s in _SIGNAL_REASONS}:
        return f"exited with code {code} ({_SIGNAL_REASONS[signal.Signals(code - 128)]})"
    return f"exited with code {code}"


@dataclass(frozen=True)
class RankFailure:
    """How one rank ended in one attempt, and (once :func:`blame` ran) its fate.

    ``timestamp`` is torch's (the poll that noticed, or the error file's); ``raised_at``
    when the bootstrap recorded an uncaught exception; ``died_at`` when the launcher saw
    the process end.
    """

    rank: int
    local_rank: int
    pid: int | None
    exitcode: int | None
    attempt: int
    timestamp: float
    type: str | None = None
    message: str | None = None
    traceback: str | None = None
    raised_at: float | None = None
    died_at: float | None = None
    fate: str | None = None
    stopped: str | None = None  # why accel stopped it, when fate is "stopped"

    @property
    def failed_at(self) -> float:
        known = [t for t in (self.raised_at, self.died_at) if t is not None]
        return min(known) if known else self.timestamp

    @property
    def explanation(self) -> str:
        if self.fate in (STOPPED, STUCK):
            how = _stop_signal(self.exitcode)
            return f"stopped by accel{how} {self.stopped or 'after a failure'}"
        return explain_exit(self.exitcode)

    @property
    def summary(self) -> str:
        if self.type:
            return f"{self.type}: {self.message}" if self.message else self.type
        return self.explanation

    def scrubbed(self, secrets: Sequence[str]) -> RankFailure:
        """This failure with every known secret value hidden in its message and traceback."""
        if not secrets:
            return self
        message, trace = (scrub(t, secrets) if t else t for t in (self.message, self.traceback))
        return replace(self, message=message, traceback=trace)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["explanation"] = self.explanation
        if self.traceback:
            data["traceback"] = "\n".join(self.traceback.splitlines()[-TRACEBACK_TAIL:])
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankFailure | None:
        """A failure read back from run.json (any accel version); None when unusable."""
        rank = data.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            return None
        return cls(
            rank=rank,
            local_rank=_int(data.get("local_rank"), rank),
            pid=_opt_int(data.get("pid")),
            exitcode=_opt_int(data.get("exitcode")),
            attempt=_int(data.get("attempt"), 0),
            timestamp=_float(data.get("timestamp")) or 0.0,
            type=_opt_str(data.get("type")),
            message=_opt_str(data.get("message")),
            traceback=_opt_str(data.get("traceback")),
            raised_at=_float(data.get("raised_at")),
            died_at=_float(data.get("died_at")),
            fate=_opt_str(data.get("fate")),
            stopped=_opt_str(data.get("stopped")),
        )


def _stop_signal(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            return ""
    return ""


@dataclass(frozen=True)
class Stop:
    """accel began stopping the workers of an attempt at ``at`` (epoch seconds).

    ``culprits``: the rank that logged the diverged metric (``diverged``); ``detail``
    says what it was.
    """

    at: float
    reason: str = BY_FAILURE
    culprits: tuple[int, ...] = ()
    detail: str | None = None


@dataclass(frozen=True)
class Verdict:
    """Every rank's fate; ``failures`` are the inputs with ``fate`` (and ``stopped``) set."""

    failures: tuple[RankFailure, ...]

    @property
    def first(self) -> RankFailure | None:
        """The failing rank (or the first stuck one after a hang)."""
        for fate in (FAILED, STUCK):
            found = self.with_fate(fate)
            if found:
                return found[0]
        return None

    def with_fate(self, fate: str) -> tuple[RankFailure, ...]:
        return tuple(f for f in self.failures if f.fate == fate)

    def ranks(self, fate: str) -> tuple[int, ...]:
        return tuple(f.rank for f in self.with_fate(fate))


def headline(verdict: Verdict) -> str | None:
    """One line naming who is to blame, as every report says it."""
    root = verdict.first
    if root is None:
        return None
    if root.fate == STUCK:
        stuck = verdict.with_fate(STUCK)
        waiting = verdict.ranks(STOPPED)
        them = "it" if len(stuck) == 1 else "them"
        others = f"; rank(s) {_ranks(waiting)} waited for {them}" if waiting else ""
        return stuck_line([(f.rank, f.message or "stuck") for f in stuck]) + others
    why = f" ({root.explanation})" if root.type and root.type != "Diverged" else ""
    return f"rank {root.rank} failed first: {root.summary}{why}"


MOST_RANKS = 8  # ranks a line names before it counts the rest
MOST_PLACES = 3  # ways of being stuck a line names before it counts the rest


def stuck_line(stuck: Sequence[tuple[int, str]]) -> str:
    """Every stuck rank, with how (``stuck in f (train.py), ...``), in one bounded line:
    ``rank 1 is stuck in ...``, ``ranks 0, 1 are stuck in ...``; ranks stuck alike together."""
    alike: dict[str, list[int]] = {}
    for rank, how in stuck:
        alike.setdefault(how, []).append(rank)
    groups = list(alike.items())
    said = [
        f"rank {ranks[0]} is {how}" if len(ranks) == 1 else f"ranks {_ranks(ranks)} are {how}"
        for how, ranks in groups[:MOST_PLACES]
    ]
    left = sum(len(ranks) for _, ranks in groups[MOST_PLACES:])
    if left:
        said.append(f"{left} more rank(s) are stuck elsewhere")
    return "; ".join(said)


def _ranks(ranks: Iterable[int]) -> str:
    shown = [str(r) for r in ranks]
    if len(shown) > MOST_RANKS:
        return f"{', '.join(shown[:MOST_RANKS])} and {len(shown) - MOST_RANKS} more"
    return ", ".join(shown)


# -- reading -----------------------------------------------------------------------------


def from_records(entries: Sequence[Any]) -> list[RankFailure]:
    """The failures of one attempt as run.json holds them (unusable entries skipped)."""
    out = []
    for entry in entries:
        failure = RankFailure.from_json(entry) if isinstance(entry, Mapping) else None
        if failure is not None:
            out.append(failure)
    return out


def recorded_verdict(attempt: Mapping[str, Any]) -> Verdict | None:
    """The verdict run.json holds for one attempt; None for records older than fates."""
    found = from_records(attempt.get("failures") or ())
    if not found or any(f.fate is None for f in found):
        return None
    return Verdict(tuple(found))


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int(value: Any, default: int) -> int:
    found = _opt_int(value)
    return default if found is None else found


def _float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
