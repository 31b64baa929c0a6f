"""torch's elastic agent, with the hooks accel needs and nothing reimplemented.

:class:`AccelAgent` is ``LocalElasticAgent`` (rendezvous, worker environment,
restarts, monitoring: all torch's) that tells a :class:`RunHooks` when workers start,
when they fail, and on every monitor tick, and stops workers with accel's grace
period. It touches no private torch name itself: those go through
:mod:`accel.launch._torch_compat`, one per supported release. Imported only when
launching: it imports torch.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch.distributed.elastic.rendezvous.registry as registry
from torch.distributed.elastic.agent.server.api import WorkerGroup, WorkerSpec, WorkerState
from torch.distributed.elastic.multiprocessing import LogsDest, LogsSpecs
from torch.distributed.elastic.rendezvous import RendezvousParameters

from accel.launch._torch_compat import (
    AGENT_STORE_ENV,
    ERROR_FILE_ENV,
    CompatAgent,
    skip_join_skew,
    speed_up_rendezvous_events,
)
from accel.launch.plan import LaunchPlan
from accel.launch.teardown import Returned, Teardown

speed_up_rendezvous_events()


class RunHooks(Protocol):
    """What the runner learns from the agent (all calls on the launcher's main thread)."""

    def attempt_started(
        self, attempt: int, pids: Mapping[int, int], nnodes: int, world_size: int, node: int
    ) -> None:
        """Workers of ``attempt`` are running: ``global rank -> pid``, in a job of
        ``nnodes`` nodes and ``world_size`` workers, this one the rendezvous' node
        ``node`` (of an elastic job, what this rendezvous gave; a change of membership
        starts the same attempt again)."""

    def attempt_failed(self, attempt: int, failures: Mapping[int, Any]) -> None:
        """``global rank -> torch ProcessFailure`` of the ranks that failed."""

    def tick(self) -> None:
        """Every monitor interval while workers run (telemetry, hang checks)."""

    notify: Callable[[str], None]  # a line for the console

    def stopping(self) -> None:
        """accel is about to signal the workers of the current attempt to stop."""

    def teardown(self, ended: Teardown) -> None:
        """A rank (``ended.rank``, global) finished, then hung or died in teardown."""

    def returned(self, rank: int, returned: Returned) -> None:
        """The script of ``rank`` (global) returned or exited, with its code."""

    def rendezvous(self, waiting: bool) -> None:
        """Rendezvous begins (``True``) or is over (``False``)."""


#: Seconds the launcher's store for the workers waits on a request (torch's default).
STORE_TIMEOUT = timedelta(minutes=30)


class AttemptStore:
    """The workers' TCPStore of a one-node job that restarts, hosted by the launcher, a
    fresh one for every attempt.

    With restarts, torch's agent does not share its own store with the workers (accel
    turns that off: its keys outlive an attempt, _torch_compat.agent_environment), and
    rank 0 of each attempt hosts one instead, on a port the agent drew from the
    ephemeral range and let go of. Every rank starts at once: one that dials before rank
    0 listens is refused, and torch's client sleeps 0.4 to 0.7 s before it dials again,
    in every script that starts its group itself (a Trainer's, Lightning's, a torchrun
    script's). A store the launcher made before the workers start is listening when
    they dial (``TORCHELASTIC_USE_AGENT_STORE=True``: every rank a client), on a port it
    holds. Where one cannot be made, the workers are left as torch starts them.
    """

    def __init__(self) -> None:
        self._store: Any = None

    def place(self, envs: Mapping[int, dict[str, str]]) -> None:
        """Point ``envs`` (torch's, one per local worker) at a fresh store, when rank 0
        would host one."""
        first = next(iter(envs.values()), None)
        if first is None or first.get(AGENT_STORE_ENV) != "False":
            return
        self._store = None  # the last attempt's, before its successor is made
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        try:
            store = TCPStore(
                first["MASTER_ADDR"], 0, int(first["WORLD_SIZE"]), True, STORE_TIMEOUT,
                wait_for_workers=False,
            )  # fmt: skip
        except Exception:  # noqa: BLE001 - rank 0 hosts it, as under torchrun
            return
        self._store = store
        for env in envs.values():
            env.update(MASTER_PORT=str(store.port), **{AGENT_STORE_ENV: "True"})


class RunLogsSpecs(LogsSpecs):  # type: ignore[misc]
    """Every local rank writes stdout and stderr into its two FIFOs; error files per
    attempt; the workers' store, when the launcher hosts it (:class:`AttemptStore`)."""

    def __init__(
        self,
        stdouts: list[Path],
        stderrs: list[Path],
        error_dir: Path,
        begin: Any,
        store: AttemptStore | None = None,
    ) -> None:
        super().__init__(log_dir=str(error_dir))
        self._stdouts = stdouts
        self._stderrs = stderrs
        self._error_dir = error_dir
        self._begin = begin
        self._store = store

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
            env[ERROR_FILE_ENV] = errors[local]
        if self._store is not None:
            self._store.place(envs)
        return LogsDest(stdouts=stdouts, stderrs=stderrs, error_files=errors)


class AccelAgent(CompatAgent):
    def __init__(
        self,
        spec: Any,
        logs_specs: Any,
        *,
        hooks: RunHooks,
        grace: int,
        ended: threading.Event | None = None,
    ) -> None:
        super().__init__(spec, logs_specs, grace=grace, ended=ended)
        self._hooks = hooks
        self._global_ranks: dict[int, int] = {}

    def workers_started(self, worker_group: WorkerGroup, pids: dict[int, Any]) -> None:
        by_rank = {w.global_rank: int(pids[w.local_rank]) for w in worker_group.workers}
        self._global_ranks = {w.local_rank: w.global_rank for w in worker_group.workers}
        world = worker_group.workers[0].world_size if worker_group.workers else 0
        nnodes = int(worker_group.group_world_size or 1)
        node = int(worker_group.group_rank or 0)
        self._hooks.attempt_started(self.restart_count, by_rank, nnodes, int(world), node)

    def workers_monitored(self, result: Any) -> None:
        if result.state == WorkerState.FAILED:
            self._hooks.attempt_failed(self.restart_count, result.failures)
        elif result.state == WorkerState.HEALTHY:
            self._hooks.tick()

    def worker_teardown(self, ended: Teardown) -> None:
        rank = self._global_ranks.get(ended.rank, ended.rank)
        self._hooks.teardown(replace(ended, rank=rank))

    def worker_returned(self, local_rank: int, returned: Returned) -> None:
        self._hooks.returned(self._global_ranks.get(local_rank, local_rank), returned)

    def workers_stopping(self, death_sig: signal.Signals | None) -> None:
        # When accel began stopping separates a rank's own failure from a stopped one.
        self._hooks.stopping()
        if death_sig == signal.SIGINT:  # Ctrl-C: say what accel waits for, and the way out
            self._hooks.notify(
                f"accel: stopping the workers (up to {self._accel_grace}s); "
                "Ctrl-C again to kill them now"
            )

    def rendezvous_waiting(self, waiting: bool) -> None:
        self._hooks.rendezvous(waiting)

    def exit_barrier_waiting(self, nodes: int, timeout: float) -> None:
        self._hooks.notify(
            f"accel: this node's workers are done; waiting up to {timeout:.0f}s for the "
            f"other node(s) of {nodes} to finish (torch's exit barrier keeps node 0's store "
            "up for them); Ctrl-C or SIGTERM ends the wait now"
        )


def rendezvous_handler(plan: LaunchPlan, last_call: float) -> Any:
    """torch's c10d rendezvous for the plan's nodes (a range, when elastic)."""
    skip_join_skew(plan.nnodes == 1)
    configs: dict[str, Any] = {"timeout": 900}
    if plan.nnodes > 1 and plan.rdzv_is_host is not None:
        configs["is_host"] = plan.rdzv_is_host
    if plan.elastic:  # once min_nodes are in, wait this long for more (torch: 30 s)
        configs["last_call_timeout"] = last_call
    params = RendezvousParameters(
        backend=plan.rdzv_backend,
        endpoint=plan.rdzv_endpoint,
        run_id=plan.rdzv_id,
        min_nodes=plan.min_nodes or plan.nnodes,
        max_nodes=plan.nnodes,
        local_addr=plan.local_addr,
        **{**configs, **plan.rdzv_conf},  # torchrun --rdzv-conf wins, as under torchrun
    )
    return registry.get_rendezvous_handler(params)


def worker_spec(plan: LaunchPlan, handler: Any) -> Any:
    return WorkerSpec(
        role=plan.role,
        local_world_size=plan.nproc_per_node,
        entrypoint=plan.entrypoint,
        args=plan.worker_args,
        rdzv_handler=handler,
        max_restarts=plan.max_restarts,
        monitor_interval=0.1,
    )
