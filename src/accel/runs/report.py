"""The run record (``run.json``) and the failure reports in it: pure functions on data.

``run.json`` is rewritten atomically as the run progresses: at the start (``running``),
at every restart, and at the end. See docs/commands/runs.md for the schema. What is
written is :func:`for_disk`: secrets (``--env`` and ``launch.env`` values, tokens in
the command line, credentials in URLs and error messages) never reach the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from accel._redact import redact_mapping
from accel.runs.failures import (
    ALSO_FAILED,
    STOPPED,
    STUCK,
    RankFailure,
    Stop,
    Verdict,
    explain_exit,
)
from accel.runs.status import RunStatus

RECORD_VERSION = 1

__all__ = [
    "LaunchFacts",
    "RankFailure",
    "explain_exit",
    "finished_record",
    "for_disk",
    "start_record",
    "with_attempt",
    "with_failures",
]


class LaunchFacts(Protocol):
    """What the record says of the launch (an :class:`accel.launch.LaunchPlan` has it)."""

    @property
    def run_id(self) -> str: ...
    @property
    def run_name(self) -> str: ...
    @property
    def command(self) -> Sequence[str]: ...
    @property
    def worker_command(self) -> Sequence[str]: ...
    @property
    def cwd(self) -> Path: ...
    @property
    def config(self) -> Mapping[str, Any]: ...
    @property
    def started_at(self) -> str: ...
    @property
    def nnodes(self) -> int: ...
    @property
    def node_rank(self) -> int: ...
    @property
    def nproc_per_node(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def elastic(self) -> bool: ...
    @property
    def min_nodes(self) -> int | None: ...
    @property
    def rdzv_backend(self) -> str: ...
    @property
    def rdzv_endpoint(self) -> str: ...
    @property
    def rdzv_id(self) -> str: ...


def for_disk(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as it may be written: every secret in it replaced by ``***``."""
    return redact_mapping(record)


def start_record(plan: LaunchFacts, facts: Mapping[str, Any]) -> dict[str, Any]:
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
        "status": RunStatus.RUNNING,
        "exit_code": None,
        "failed_rank": None,
        "error": None,
        "also_failed_ranks": [],
        "stopped_ranks": [],
        "stuck_ranks": [],
        "restarts": 0,
        "attempts": [],
        "nnodes": plan.nnodes,
        **({"min_nnodes": plan.min_nodes} if plan.elastic else {}),
        "node_rank": plan.node_rank,
        "nproc_per_node": plan.nproc_per_node,
        # an elastic job's size is known once its nodes have met (then each start's)
        "world_size": None if plan.elastic else plan.world_size,
        "rdzv": {"backend": plan.rdzv_backend, "endpoint": plan.rdzv_endpoint, "id": plan.rdzv_id},
        **facts,
    }


def with_attempt(
    record: Mapping[str, Any],
    attempt: int,
    started_at: str,
    nnodes: int | None = None,
    world_size: int | None = None,
    node_rank: int | None = None,
) -> dict[str, Any]:
    """A new start of the workers. torch's restart count does not grow when an elastic
    job restarts for a node that joined: that start repeats the attempt number, and the
    record's ``nnodes``, ``world_size`` and ``node_rank`` (the rendezvous' number for
    this node, whatever ``--node-rank`` asked) follow the latest start."""
    entry: dict[str, Any] = {"attempt": attempt, "started_at": started_at}
    sizes: dict[str, Any] = {}
    if nnodes is not None and world_size is not None:
        sizes = {"nnodes": nnodes, "world_size": world_size}
    if node_rank is not None:
        sizes["node_rank"] = node_rank
    entry.update(sizes)
    attempts = [*record.get("attempts", []), entry]
    return {**record, **sizes, "restarts": attempt, "attempts": attempts}


def with_failures(
    record: Mapping[str, Any], attempt: int, verdict: Verdict, stop: Stop | None
) -> dict[str, Any]:
    """The attempt's entry gains every rank's end and fate (and when accel stopped it)."""
    attempts = [dict(a) for a in record.get("attempts", [])]
    latest = [a for a in attempts if a.get("attempt") == attempt][-1:]  # its latest start
    for entry in latest:
        if entry.get("attempt") == attempt:
            entry["failures"] = [f.to_json() for f in verdict.failures]
            if stop is not None:
                entry["stopped_at"] = stop.at
                entry["stop_reason"] = stop.reason
                if stop.detail:
                    entry["stop_detail"] = stop.detail
    return {**record, "attempts": attempts}


def with_teardown(
    record: Mapping[str, Any], attempt: int, ended: Mapping[str, Any]
) -> dict[str, Any]:
    """A rank whose script finished, then hung or died in teardown (``Teardown.to_json``)."""
    entry = {"attempt": attempt, **ended}
    return {**record, "teardown": [*record.get("teardown", []), entry]}


def finished_record(
    record: Mapping[str, Any],
    *,
    status: RunStatus | str,
    exit_code: int,
    ended_at: str,
    verdict: Verdict | None = None,
) -> dict[str, Any]:
    """The final record: the failing rank, and who also failed, was stopped or stuck."""
    verdict = verdict or Verdict(())
    root = verdict.first
    return {
        **record,
        "status": status,
        "exit_code": exit_code,
        "ended_at": ended_at,
        "failed_rank": root.rank if root else None,
        "error": root.to_json() if root else None,
        "also_failed_ranks": list(verdict.ranks(ALSO_FAILED)),
        "stopped_ranks": list(verdict.ranks(STOPPED)),
        "stuck_ranks": list(verdict.ranks(STUCK)),
    }
