"""The run record (``run.json``) and the failure reports in it: pure functions on data.

``run.json`` is rewritten atomically as the run progresses: at the start (``running``),
at every restart, and at the end. See docs/commands/runs.md for the schema. What is
written is :func:`for_disk`: secrets (``--env`` and ``launch.env`` values, tokens in
the command line, credentials in URLs and error messages) never reach the file.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from accel._redact import redact_mapping
from accel.launch.plan import LaunchPlan

RECORD_VERSION = 1
TRACEBACK_TAIL = 60  # lines of the failing rank's traceback kept in run.json

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
    """One rank that ended badly in one attempt."""

    rank: int
    local_rank: int
    pid: int | None
    exitcode: int | None
    attempt: int
    timestamp: float
    type: str | None = None
    message: str | None = None
    traceback: str | None = None
    collateral: bool = False

    @property
    def explanation(self) -> str:
        return explain_exit(self.exitcode)

    @property
    def summary(self) -> str:
        if self.type:
            return f"{self.type}: {self.message}" if self.message else self.type
        return self.explanation

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["explanation"] = self.explanation
        if self.traceback:
            data["traceback"] = "\n".join(self.traceback.splitlines()[-TRACEBACK_TAIL:])
        return data


def first_failure(failures: Sequence[RankFailure]) -> RankFailure | None:
    """The root cause among the failures of one attempt.

    A rank with an exception beats one that died of a signal, which beats one that was
    terminated or interrupted (the agent stops the others with SIGTERM as soon as one
    fails); then the earliest, then the lowest rank.
    """
    roots = [f for f in failures if not f.collateral] or list(failures)
    return min(roots, key=_blame) if roots else None


def _blame(f: RankFailure) -> tuple[int, float, int]:
    stopped = f.exitcode in (-signal.SIGTERM, -signal.SIGINT)
    priority = 0 if f.type else (2 if stopped else 1)
    return priority, f.timestamp, f.rank


def for_disk(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as it may be written: every secret in it replaced by ``***``."""
    return redact_mapping(record)


def start_record(plan: LaunchPlan, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The record written when the run starts; ``facts`` adds hostname, pid, versions."""
    return {
        "version": RECORD_VERSION,
        "id": plan.run_id,
        "name": plan.run_name,
        "command": list(plan.command),
        "worker_command": list(plan.worker_command),
        "cwd": str(plan.cwd),
        "config": dict(plan.config),
        "started_at": plan.started_at,
        "ended_at": None,
        "status": "running",
        "exit_code": None,
        "failed_rank": None,
        "error": None,
        "collateral_ranks": [],
        "restarts": 0,
        "attempts": [],
        "nnodes": plan.nnodes,
        "node_rank": plan.node_rank,
        "nproc_per_node": plan.nproc_per_node,
        "world_size": plan.world_size,
        "rdzv": {"backend": plan.rdzv_backend, "endpoint": plan.rdzv_endpoint, "id": plan.rdzv_id},
        **facts,
    }


def with_attempt(record: Mapping[str, Any], attempt: int, started_at: str) -> dict[str, Any]:
    attempts = [*record.get("attempts", []), {"attempt": attempt, "started_at": started_at}]
    return {**record, "restarts": attempt, "attempts": attempts}


def with_failures(
    record: Mapping[str, Any], attempt: int, failures: Sequence[RankFailure]
) -> dict[str, Any]:
    attempts = [dict(a) for a in record.get("attempts", [])]
    for entry in attempts:
        if entry.get("attempt") == attempt:
            entry["failures"] = [f.to_json() for f in failures]
    return {**record, "attempts": attempts}


def finished_record(
    record: Mapping[str, Any],
    *,
    status: str,
    exit_code: int,
    ended_at: str,
    failures: Sequence[RankFailure] = (),
    ranks: Sequence[int] = (),
) -> dict[str, Any]:
    """The final record; every rank but the root cause of a failure is collateral."""
    root = first_failure(failures)
    collateral = sorted(set(ranks) - {root.rank}) if root else []
    return {
        **record,
        "status": status,
        "exit_code": exit_code,
        "ended_at": ended_at,
        "failed_rank": root.rank if root else None,
        "error": root.to_json() if root else None,
        "collateral_ranks": collateral,
    }
