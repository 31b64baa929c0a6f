"""Running a :class:`LaunchPlan`: the run lock, the guard, the agent, the record.

The only module of the launcher that does IO on the whole: it holds the run's lock
for the whole run (that is what makes it *live*), applies the worker environment,
runs torch's elastic agent, and rewrites run.json at the start, at every restart and
at the end. It prints nothing: console lines and notices go to callbacks.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel import runs
from accel._redact import secret_values
from accel.launch import rendezvous
from accel.launch._ends import launch_error, rank_ends, with_crashes
from accel.launch._host import (
    HANDLED_SIGNALS,
    Signalled,
    early_warning_stops,
    facts,
    kill_groups,
    native_stderr_to,
    quiet_torch_logs,
    signal_of,
    signals_raise,
)
from accel.launch.blame import blame
from accel.launch.deaths import ExitWatch
from accel.launch.divergence import NonFinite
from accel.launch.guard import Guard
from accel.launch.observe import RunObserver
from accel.launch.plan import LaunchPlan
from accel.launch.preload import worker_pids
from accel.layout import LAUNCHER_LOG
from accel.runs import report
from accel.runs.failures import (
    BY_DIVERGENCE,
    BY_FAILURE,
    BY_SIGNAL,
    STUCK,
    RankFailure,
    Stop,
    Verdict,
    headline,
)
from accel.runs.logs import ConsoleSink, LogRouter
from accel.runs.status import RunStatus
from accel.runs.torchrun_logs import LogMirror

if TYPE_CHECKING:
    from accel.launch.teardown import Returned, Teardown
    from accel.store.persister import Persister
    from accel.workspace import Workspace

Notify = Callable[[str], None]

# How long a node whose job ended waits for its spare nodes to see the end: an accel spare
# polls torch's rendezvous state every 1 to 2 s and says when it has; a spare of another
# launcher never says, and costs the whole wait.
SPARE_WAIT_S = 10.0


@dataclass(frozen=True)
class RunOutcome:
    """How the run ended; ``exit_code`` is what ``accel launch`` exits with, ``verdict``
    every rank's fate in the last attempt (see :mod:`accel.launch.blame`)."""

    run_id: str
    run_dir: Path
    status: RunStatus
    exit_code: int
    restarts: int
    verdict: Verdict = field(default_factory=lambda: Verdict(()))
    tails: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    diverged: NonFinite | None = None
    spare: bool = False  # this node waited as a spare and the job ended without it

    @property
    def root(self) -> RankFailure | None:
        return self.verdict.first


class _Diverged(Exception):
    """Raised on the agent's thread to end the run (``logs.on_nonfinite: stop``)."""


def launch(
    plan: LaunchPlan,
    ws: Workspace,
    *,
    sink: ConsoleSink | None = None,
    notify: Notify | None = None,
) -> RunOutcome:
    """Run the plan to its end; the caller turns the outcome into an exit code."""
    timing = rendezvous.Timing.from_env(os.environ)  # a bad timing variable: exit 2, nothing made
    if _endpoint_given(plan):
        # a typo: exit 2 before anything; node 0 at another machine's address: the same
        rendezvous.check_resolves(plan.rdzv_endpoint, plan.rdzv_named)
        if plan.rdzv_is_host:
            rendezvous.check_hosted_here(plan.rdzv_endpoint, timing, plan.rdzv_named)
    if plan.local_addr is not None:  # the workers' MASTER_ADDR, maybe: the same
        rendezvous.check_local_addr(plan.local_addr, timing)
    from accel.store import memtier

    # one line for a bad pair, or for shared memory the tier cannot go in, before anything
    if memtier.snapshot_settings(ws.settings.checkpoints)[0] is not None and plan.nnodes == 1:
        memtier.check_base()
    ws.ensure()
    _check_series(ws, plan)  # before anything starts
    guard = Guard(plan.run_id).start()  # forked before torch is imported: cheap and safe
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(runs.run_lock(ws.layout, plan.run_id))
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="accel-run-")))
            guard.remove_at_end(scratch)  # if the launcher is SIGKILLed
            stack.callback(guard.end_descendants)  # while the run is still live
            if plan.preload:  # launch.preload: workers forked from a template (preload.py)
                from accel.launch.preload import template

                plan = stack.enter_context(template(plan, scratch, guard.remove_at_end))
            run = _Run(plan, scratch, sink, notify or (lambda _: None), timing)
            run.persister = _memory_tier(ws, plan, stack, guard, run.notify)
            outcome = run.execute()
    finally:
        guard.stop()
    _retention_owed(ws)
    runs.note_settled(ws.layout)  # its record is final: the heals to come skip it
    return outcome


def _retention_owed(ws: Workspace) -> None:
    """The run is over (its workers gone, its run lock free): pay the retention a reader
    held back during its saves (store/lease.py), or a keep_last run would end with
    every checkpoint it saved while an export read."""
    from accel.store.lease import catch_up_retention

    catch_up_retention(ws.layout)


def _check_series(ws: Workspace, plan: LaunchPlan) -> None:
    """Refuse, before anything starts, a run whose checkpoint series a live run holds.

    The launcher does not take the series: rank 0 takes it at its first save, so runs
    that never save (a sweep of plain scripts) never collide, and once taken it stays
    the run's until the run ends, restarts included (:mod:`accel.store.lease`). Only
    node 0 checks: on a shared filesystem the other nodes would see their own run's
    lease. Without a --node-rank (torchrun's c10d lines) no node knows it is node 0
    before the rendezvous: none checks, and rank 0 meets a live holder at its first save.
    """
    if plan.node_rank != 0 or (plan.nnodes > 1 and plan.rdzv_is_host is None):
        return
    from accel.errors import UsageError
    from accel.store.lease import held_message, holder_of

    holder = holder_of(ws.layout, plan.run_name)
    if holder is not None and holder.run_id != plan.run_id:
        raise UsageError(held_message(plan.run_name, holder))


def _memory_tier(
    ws: Workspace, plan: LaunchPlan, stack: contextlib.ExitStack[Any], guard: Guard, notify: Notify
) -> Persister | None:
    """``checkpoints.snapshot_every``: the run's shared-memory folder and its persister,
    both ended with the run (the guard removes the folder if the launcher is killed)."""
    from accel.store import memtier
    from accel.store.persister import Persister

    settings = ws.settings.checkpoints
    every = memtier.snapshot_settings(settings)[0]
    if every is None:
        return None
    if plan.nnodes > 1:
        notify(
            "accel: checkpoints.snapshot_every keeps snapshots on one node only; this run "
            "has several, so its checkpoints are saved blocking every persist_every steps"
        )
        return None
    tier = memtier.make_tier(plan.run_id)
    guard.remove_at_end(tier)
    stack.callback(memtier.remove_tier, tier)
    store = ws.checkpoints
    persister = Persister(
        tier,
        store.commit_files,
        plan.nproc_per_node,
        settings.persist_every,
        run_id=plan.run_id,
        notify=notify,
    )
    stack.callback(persister.stop)  # before the folder goes: callbacks run last-in first
    return persister.start()


class _Run:
    """One run on this node: implements the agent's hooks and keeps the record."""

    persister: Persister | None = None

    def __init__(
        self,
        plan: LaunchPlan,
        scratch: Path,
        sink: ConsoleSink | None,
        notify: Notify,
        timing: rendezvous.Timing,
    ):
        self.plan = plan
        self.notify = notify
        self.record: dict[str, Any] = {}
        self.pids: dict[int, int] = {}
        self.attempt = 0
        self.started = 0.0  # when the current attempt's workers started
        self.exits = ExitWatch()
        self.finished: dict[int, Returned] = {}  # rank -> how its script returned or exited
        self.stop_times: dict[int, float] = {}  # attempt -> when accel began stopping it
        self.verdict = Verdict(())
        self.restored = False  # the tier holds restore/ for the current attempt
        self.error_dir = scratch / "errors"
        argv = (*plan.command, *plan.worker_command)
        self.secrets = secret_values({**os.environ, **plan.worker_env}, argv=argv)
        self.router = LogRouter(
            plan.run_dir,
            scratch,
            plan.nproc_per_node,
            sink,
            self._show,
            secrets=self.secrets,
            torchrun=plan.torchrun_logs,
        )
        # Under preload, telemetry reads the forked workers, not their shims.
        observed = lambda: worker_pids(self.plan, self.pids)  # noqa: E731
        self.observer = RunObserver(plan, observed, self.router.last_output, notify)
        self.timing = timing
        self.world: tuple[int, int] | None = None  # (nodes, workers) of the current start
        self.handler: Any = None
        self.reporter: rendezvous.WaitReporter | None = None
        self.spare_unused = False  # a spare node let go when the job ended: nothing ran

    def _show(self, rank: int) -> bool:
        return self.plan.shows(rank)

    # -- the run -------------------------------------------------------------------------

    def execute(self) -> RunOutcome:
        plan = self.plan
        mirror = None  # torchrun's --log-dir: refused (a folder it cannot make) before a run
        if plan.torchrun_logs.log_dir is not None:
            mirror = LogMirror(plan.torchrun_logs, plan.rdzv_id, plan.role)
        self.plan.run_dir.mkdir(parents=True, exist_ok=False)
        # Named once it exists: a launch refused before never names a folder it never made.
        said = [f"run {plan.run_id}: {plan.world_size_text} worker(s), logs in {plan.run_dir}"]
        if mirror is not None:
            said.append(f"torchrun's log files in {mirror.root}")
        for line in (*said, *plan.notes):  # then what accel chose for the user
            self.notify(f"accel: {line}")
        self.record = report.start_record(self.plan, facts(self.plan.cwd))
        self._save()
        status, code = RunStatus.FAILED, 1
        self.router.start(mirror)
        self.observer.start()
        try:
            with (
                signals_raise(),
                early_warning_stops(),
                _worker_environ(self.plan, self.persister.tier if self.persister else None),
                native_stderr_to(self.plan.run_dir / LAUNCHER_LOG),
            ):
                status, code = self._run_agent()
        except Signalled as exc:
            status, code = RunStatus.INTERRUPTED, 128 + exc.signum
        except _Diverged:
            status, code = RunStatus.FAILED, 1
            self._judge(self.attempt, {})
        except BaseException as exc:
            sig = signal_of(exc)
            if sig is None:
                log = self.plan.run_dir / LAUNCHER_LOG
                error = launch_error(exc, log, self.plan.rdzv_endpoint, self._spare())
                self._finish(RunStatus.FAILED, getattr(error, "exit_code", 1))
                if error is exc:
                    raise
                raise error from exc
            status, code = RunStatus.INTERRUPTED, 128 + sig
        finally:
            self._stop_reporting()
            kill_groups(self.pids.values())  # left alive only by a second Ctrl-C
            self.observer.stop()
            self.router.close()
        return self._finish(status, code)

    def _run_agent(self) -> tuple[RunStatus, int]:
        from accel.launch._torch_compat import spare_left
        from accel.launch.agent import (
            AccelAgent,
            AttemptStore,
            RunLogsSpecs,
            rendezvous_handler,
            worker_spec,
        )

        if _endpoint_given(self.plan) and not _may_host(self.plan):
            rendezvous.wait_for_host(self.plan.rdzv_endpoint, self.timing, self.notify)
        self.handler = handler = rendezvous_handler(self.plan, self.timing.last_call)
        spec = worker_spec(self.plan, handler)
        quiet_torch_logs()
        router = self.router
        logs = RunLogsSpecs(
            router.stdout_fifos,
            router.stderr_fifos,
            self.error_dir,
            router.begin_attempt,
            AttemptStore() if self.plan.nnodes == 1 else None,
        )
        grace = math.ceil(self.plan.grace_period)
        agent = AccelAgent(spec, logs, hooks=self, grace=grace, ended=self.exits.ended)
        interrupted = False
        try:
            result = agent.run()
        except BaseException as exc:
            interrupted = signal_of(exc) is not None or isinstance(exc, _Diverged)
            raise
        finally:
            if not interrupted:  # torch keeps the rendezvous open for the other nodes then
                with contextlib.suppress(Exception):
                    handler.shutdown()
            if self._spare():  # leaving, for whatever reason: the job need not wait for it
                spare_left(handler)
        self._let_spares_go(result is None and self.world is None)
        if result is not None and result.is_failed():
            return RunStatus.FAILED, 1
        return RunStatus.SUCCEEDED, 0

    def _let_spares_go(self, unused: bool) -> None:
        """The job ended: a spare node (an elastic job's node past its most) learns it
        only from the rendezvous' store, which ends with the node that hosts it, so every
        node waits until the spares it knows of have seen the end or left (at most
        :data:`SPARE_WAIT_S`). ``unused``: this node was such a spare, let go unused."""
        from accel.launch._torch_compat import rendezvous_spares, wait_for_spares

        if unused:
            self.spare_unused = True
            return
        spares = rendezvous_spares(self.handler)
        if spares:
            self.notify(f"accel: telling {len(spares)} spare node(s) that the job ended")
            wait_for_spares(self.handler, spares, SPARE_WAIT_S)

    # -- hooks called by the agent ----------------------------------------------------

    def rendezvous(self, waiting: bool) -> None:
        if not waiting:
            self._stop_reporting()
            return
        from accel.launch._torch_compat import rendezvous_participants, rendezvous_role

        handler = self.handler
        self.reporter = rendezvous.WaitReporter(
            self.plan.rdzv_endpoint,
            self.plan.min_nodes or self.plan.nnodes,
            lambda: rendezvous_participants(handler),
            self.notify,
            self.timing.report,
            most=self.plan.nnodes,
            role=lambda: rendezvous_role(handler),
        ).start()

    def _stop_reporting(self) -> None:
        if self.reporter is not None:
            self.reporter.stop()
            self.reporter = None

    def attempt_started(
        self, attempt: int, pids: Mapping[int, int], nnodes: int, world_size: int, node: int
    ) -> None:
        if self.world is not None and attempt == self.attempt:
            # torch restarted the workers for a node that joined (elastic): not a
            # failure, and not counted as a restart. The stop it made is not a verdict.
            self.stop_times.pop(attempt, None)
            self.notify(
                f"accel: the job now has {nnodes} node(s): restarted the workers with "
                f"{world_size} in all"
            )
        elif self.plan.elastic:
            self.notify(f"accel: {nnodes} node(s) joined: {world_size} worker(s) in all")
        if self.plan.rdzv_is_host is not None and node != self.record.get("node_rank"):
            # --node-rank decides who hosts the store; c10d numbers the nodes itself, in
            # the order of their host names and then process ids (as under torchrun),
            # and the global ranks follow its numbers.
            ranks = f"{min(pids)}-{max(pids)}" if len(pids) > 1 else f"{min(pids, default=0)}"
            self.notify(
                f"accel: the rendezvous made this node {node} of {nnodes} (--node-rank "
                f"{self.plan.node_rank} asked; c10d numbers the nodes by host name and "
                f"process, as under torchrun): global rank(s) {ranks} run here"
            )
        self.world = (nnodes, world_size)
        self.attempt = attempt
        self.started = time.time()
        self.pids = dict(pids)
        self.finished = {}
        self.exits.watch(pids)
        self.record = report.with_attempt(self.record, attempt, _now(), nnodes, world_size, node)
        self._save()
        self.observer.attempt_started(attempt, pids)

    def stopping(self) -> None:
        if self.attempt not in self.stop_times:
            # The ends the kernel already knows of are noted first: they are no stop's.
            self.stop_times[self.attempt] = self.exits.stopping()

    def returned(self, rank: int, returned: Returned) -> None:
        self.finished[rank] = returned  # the script's result, whatever its teardown does

    def teardown(self, ended: Teardown) -> None:
        self.record = report.with_teardown(self.record, self.attempt, ended.to_json())
        self._save()
        self.notify(f"accel: {ended.message}")

    def attempt_failed(self, attempt: int, failures: Mapping[int, Any]) -> None:
        # First: the newest whole snapshot outlives the failure. Before a restart, it is
        # committed beside it, and the restart's workers map it from memory.
        left = self.plan.max_restarts - attempt
        if self.persister is not None and left > 0:
            self.restored = self.persister.commit_behind(self._say_restored)
        else:
            self._say_saved(self._persist_newest())
            if self.persister is not None:
                self.persister.clear()
        self._judge(attempt, failures)
        root = self.verdict.first
        if root is not None and left > 0:
            said = f"rank {root.rank} failed ({root.summary})"
            if root.fate == STUCK:  # every stuck rank, as the final report names them
                said = headline(self.verdict) or said
            self.notify(
                f"accel: {said}; restarting the workers "
                f"(restart {attempt + 1} of {self.plan.max_restarts})"
            )

    def tick(self) -> None:
        """Record what the watches found (run.json is written on this thread only)."""
        if self.restored and self.persister is not None:
            self.restored = not self.persister.drop_restored()
        updated = self.observer.tick(self.record)
        if updated is not None:
            self.record = updated
            self._save()
        if self.observer.diverged is not None:
            raise _Diverged(self.observer.diverged.message)

    # -- blame --------------------------------------------------------------------------

    def _judge(self, attempt: int, failures: Mapping[int, Any], reason: str = BY_FAILURE) -> None:
        """Decide every rank's fate in ``attempt`` and record it (see accel.launch.blame)."""
        ends = rank_ends(attempt, failures, self.pids, self.exits, self.finished)
        ends = with_crashes(ends, self.plan.run_dir, self.started)
        ends = [end.scrubbed(self.secrets) for end in ends]
        stop, clue = self._stop_of(attempt, reason)
        self.verdict = blame(ends, stop, clue)
        self.record = report.with_failures(self.record, attempt, self.verdict, stop)
        self._save()

    def _stop_of(self, attempt: int, reason: str) -> tuple[Stop | None, Any]:
        hang = self.observer.hang_stop(attempt)
        if hang is not None:
            return hang
        at = self.stop_times.get(attempt)
        diverged = self.observer.diverged
        if diverged is not None:
            culprit = (diverged.rank,) if diverged.rank in self.pids else ()
            return Stop(at or time.time(), BY_DIVERGENCE, culprit, diverged.message), None
        return (Stop(at, reason) if at is not None else None), None

    # -- end ----------------------------------------------------------------------------

    def _persist_newest(self, tag: str = "failure") -> int | None:
        """Commit the memory tier's newest whole step; the step, when there was one."""
        return None if self.persister is None else self.persister.persist_newest(tag)

    def _say_saved(self, step: int | None, then: str = "") -> None:
        if step is not None:
            self.notify(f"accel: saved the snapshot of step {step} as a checkpoint{then}")

    def _say_restored(self, step: int, from_memory: bool) -> None:
        self._say_saved(step, "; kept in memory for the restart" if from_memory else "")

    def _spare(self) -> bool:
        """Whether this node waits as a spare, no worker having run here."""
        from accel.launch._torch_compat import rendezvous_is_spare

        return self.world is None and self.handler is not None and rendezvous_is_spare(self.handler)

    def _finish(self, status: RunStatus, code: int) -> RunOutcome:
        if status != RunStatus.SUCCEEDED:  # stopped (a signal, a preemption) or failed for good
            stopped = status == RunStatus.INTERRUPTED  # nothing failed: a preemption's
            self._say_saved(self._persist_newest("stopped" if stopped else "failure"))
        if status == RunStatus.INTERRUPTED and self.pids:
            self._judge(self.attempt, {}, BY_SIGNAL)
        verdict = self.verdict if status != RunStatus.SUCCEEDED else Verdict(())
        self.record, status = self.observer.finish(self.record, status)
        if status == RunStatus.INTERRUPTED:
            verdict = Verdict(())  # nobody to blame: the launcher was told to stop
        self.record = report.finished_record(
            self.record, status=status, exit_code=code, ended_at=_now(), verdict=verdict
        )
        if self.spare_unused:  # what `runs show` and `logs` say of a run with no attempt
            self.record["spare"] = True
        self._save()
        return RunOutcome(
            run_id=self.plan.run_id,
            run_dir=self.plan.run_dir,
            status=status,
            exit_code=code,
            restarts=int(self.record.get("restarts", 0)),
            verdict=verdict,
            tails={r: tuple(self.router.tail(r)) for r in self.pids},
            diverged=self.observer.diverged,
            spare=self.spare_unused,
        )

    def _save(self) -> None:
        runs.write_record(self.plan.run_dir, self.record, self.secrets)


# -- torch glue -------------------------------------------------------------------------


def _endpoint_given(plan: LaunchPlan) -> bool:
    """Whether the rendezvous is at an endpoint the job was told: every job of several
    nodes, and one node given one (not ``HOST:0``, torchrun's --standalone, where the
    store binds a free port of this machine)."""
    return plan.nnodes > 1 or not plan.rdzv_endpoint.endswith(":0")


def _may_host(plan: LaunchPlan) -> bool:
    if plan.rdzv_is_host is not None:
        return plan.rdzv_is_host
    from accel.launch._torch_compat import may_host

    return may_host(rendezvous.split_endpoint(plan.rdzv_endpoint)[0])


@contextlib.contextmanager
def _worker_environ(plan: LaunchPlan, tier: Path | None) -> Iterator[None]:
    """torch's agent hands ``os.environ`` to the workers: set ours there, for the run only."""
    from accel.launch._torch_compat import agent_environment
    from accel.launch.launcher_env import run_env

    wanted = {
        **plan.worker_env,
        **run_env(plan.run_dir, os.getpid(), tier),
        **agent_environment(HANDLED_SIGNALS, plan.max_restarts > 0 or plan.elastic, os.environ),
    }
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="milliseconds")
