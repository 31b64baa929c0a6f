"""torch's elastic agent, with the hooks accel needs and nothing reimplemented.

:class:`AccelAgent` is ``LocalElasticAgent`` (rendezvous, worker environment,
restarts, monitoring: all torch's) that tells a :class:`RunHooks` when workers start,
when they fail, and on every monitor tick, and stops workers with accel's grace
period. Imported only when launching: it imports torch.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing import LogsDest, LogsSpecs
from torch.distributed.elastic.rendezvous import dynamic_rendezvous


def _method_name(depth: int = 2) -> str:
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:
        return "no_method_name"


# torch names rendezvous events with inspect.stack(), which reads the source of every
# frame on the stack, twice per event: about a second of a launch's start-up behind a
# CLI's deep stack. The frame's function name is all it keeps; this gets it directly.
if callable(getattr(dynamic_rendezvous, "get_method_name", None)):
    dynamic_rendezvous.get_method_name = _method_name


class RunHooks(Protocol):
    """What the runner learns from the agent (all calls on the launcher's main thread)."""

    def attempt_started(self, attempt: int, pids: Mapping[int, int]) -> None:
        """Workers of ``attempt`` are running: ``global rank -> pid``."""

    def attempt_failed(self, attempt: int, failures: Mapping[int, Any]) -> None:
        """``global rank -> torch ProcessFailure`` of the ranks that failed."""

    def tick(self) -> None:
        """Every monitor interval while workers run (telemetry, hang checks)."""


class RunLogsSpecs(LogsSpecs):  # type: ignore[misc]
    """Every local rank writes stdout and stderr into its two FIFOs; error files per attempt."""

    def __init__(
        self, stdouts: list[Path], stderrs: list[Path], error_dir: Path, begin: Any
    ) -> None:
        super().__init__(log_dir=str(error_dir))
        self._stdouts = stdouts
        self._stderrs = stderrs
        self._error_dir = error_dir
        self._begin = begin

    @property
    def root_log_dir(self) -> str:
        return str(self._error_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        restart = int(envs[0]["TORCHELASTIC_RESTART_COUNT"]) if envs else 0
        attempt_dir = self._error_dir / f"attempt-{restart}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        self._begin({local: int(env["RANK"]) for local, env in envs.items()}, restart)
        stdouts = {local: str(self._stdouts[local]) for local in envs}
        stderrs = {local: str(self._stderrs[local]) for local in envs}
        errors = {local: str(attempt_dir / f"error-{local}.json") for local in envs}
        for local, env in envs.items():  # as torch's DefaultLogsSpecs does: workers read it
            env["TORCHELASTIC_ERROR_FILE"] = errors[local]
        return LogsDest(stdouts=stdouts, stderrs=stderrs, error_files=errors)


class AccelAgent(LocalElasticAgent):  # type: ignore[misc]
    def __init__(self, *args: Any, hooks: RunHooks, grace: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hooks = hooks
        self._grace = grace

    @property
    def attempt(self) -> int:
        return int(self._worker_group.spec.max_restarts - self._remaining_restarts)

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        pids: dict[int, Any] = super()._start_workers(worker_group)
        by_rank = {w.global_rank: int(pids[w.local_rank]) for w in worker_group.workers}
        self._hooks.attempt_started(self.attempt, by_rank)
        return pids

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        result: RunResult = super()._monitor_workers(worker_group)
        if result.state == WorkerState.FAILED:
            self._hooks.attempt_failed(self.attempt, result.failures)
        elif result.state == WorkerState.HEALTHY:
            self._hooks.tick()
        return result

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        self._shutdown(signal.SIGTERM)

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        # torch waits 30 s for a rank that ignores the signal (on every path, in every
        # version); accel waits launch.stop_grace_period, then SIGKILLs the process group.
        super()._shutdown(death_sig, self._grace)
