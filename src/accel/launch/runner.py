"""Running a :class:`LaunchPlan`: the run lock, the guard, the agent, the record.

The only module of the launcher that does IO on the whole: it holds the run's lock
for the whole run (that is what makes it *live*), applies the worker environment,
runs torch's elastic agent, and rewrites run.json at the start, at every restart and
at the end. It prints nothing: console lines and notices go to callbacks.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from accel import runs
from accel._redact import secret_values
from accel.errors import JobFailed
from accel.fsutil import PRIVATE_MODE, atomic_write_json, open_private_append
from accel.launch import record, rendezvous
from accel.launch.blame import (
    BY_DIVERGENCE,
    BY_FAILURE,
    BY_SIGNAL,
    RankFailure,
    Stop,
    Verdict,
    blame,
)
from accel.launch.deaths import ExitWatch
from accel.launch.divergence import NonFinite
from accel.launch.guard import Guard
from accel.launch.logs import ConsoleSink, LogRouter
from accel.launch.observe import RunObserver
from accel.launch.plan import LaunchPlan

if TYPE_CHECKING:
    from accel.workspace import Workspace

Notify = Callable[[str], None]
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
LAUNCHER_LOG = "launcher.log"  # torch's own messages and C++ traces, kept off the console


@dataclass(frozen=True)
class RunOutcome:
    """How the run ended; ``exit_code`` is what ``accel launch`` exits with.

    ``verdict`` is every rank's fate in the last attempt (see :mod:`accel.launch.blame`).
    """

    run_id: str
    run_dir: Path
    status: str
    exit_code: int
    restarts: int
    verdict: Verdict = field(default_factory=lambda: Verdict(()))
    tails: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    diverged: NonFinite | None = None

    @property
    def root(self) -> RankFailure | None:
        return self.verdict.first


class _Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


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
    if plan.nnodes > 1:
        rendezvous.check_resolves(plan.rdzv_endpoint)  # a typo: exit 2 before anything
    ws.ensure()
    (notify or (lambda _: None))(
        f"accel: run {plan.run_id}: {plan.world_size} worker(s), logs in {plan.run_dir}"
    )
    guard = Guard(plan.run_id).start()  # forked before torch is imported: cheap and safe
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(runs.run_lock(ws, plan.run_id))
            stack.enter_context(_series_lease(ws, plan))
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="accel-run-")))
            stack.callback(guard.end_descendants)  # while the run is still live
            return _Run(plan, scratch, sink, notify or (lambda _: None)).execute()
    finally:
        guard.stop()


@contextlib.contextmanager
def _series_lease(ws: Workspace, plan: LaunchPlan) -> Iterator[None]:
    """Hold the checkpoint series lease for the whole run.

    Only node 0 holds it: rank 0 (on node 0) saves, and on a shared filesystem the
    other nodes' launchers would otherwise contend for the same series.
    """
    if plan.node_rank != 0:
        yield
        return
    from accel.store.lease import SeriesLease

    lease = SeriesLease(ws, plan.run_name, run_id=plan.run_id)
    lease.acquire()
    try:
        yield
    finally:
        lease.release()


class _Run:
    """One run on this node: implements the agent's hooks and keeps the record."""

    def __init__(self, plan: LaunchPlan, scratch: Path, sink: ConsoleSink | None, notify: Notify):
        self.plan = plan
        self.notify = notify
        self.record: dict[str, Any] = {}
        self.pids: dict[int, int] = {}
        self.attempt = 0
        self.started = 0.0  # when the current attempt's workers started
        self.exits = ExitWatch()
        self.stop_times: dict[int, float] = {}  # attempt -> when accel began stopping it
        self.verdict = Verdict(())
        self.error_dir = scratch / "errors"
        secrets = secret_values({**os.environ, **plan.worker_env})
        self.router = LogRouter(
            plan.run_dir, scratch, plan.nproc_per_node, sink, self._show, secrets=secrets
        )
        self.observer = RunObserver(plan, lambda: dict(self.pids), self.router.last_output, notify)
        self.timing = rendezvous.Timing.from_env(os.environ)
        self.handler: Any = None
        self.reporter: rendezvous.WaitReporter | None = None

    def _show(self, rank: int) -> bool:
        if self.plan.console == "quiet":
            return False
        return self.plan.console_ranks is None or rank in self.plan.console_ranks

    # -- the run -------------------------------------------------------------------------

    def execute(self) -> RunOutcome:
        self.plan.run_dir.mkdir(parents=True, exist_ok=False)
        self.record = record.start_record(self.plan, _facts(self.plan))
        self._save()
        status, code = runs.FAILED, 1
        self.router.start()
        self.observer.start()
        try:
            with (
                _signals_raise(),
                _worker_environ(self.plan),
                _native_stderr_to(self.plan.run_dir / LAUNCHER_LOG),
            ):
                status, code = self._run_agent()
        except _Signalled as exc:
            status, code = runs.INTERRUPTED, 128 + exc.signum
        except _Diverged:
            status, code = runs.FAILED, 1
            self._judge(self.attempt, {})
        except BaseException as exc:
            sig = _signal_of(exc)
            if sig is None:
                error = _launch_error(exc, self.plan.run_dir / LAUNCHER_LOG)
                self._finish(runs.FAILED, getattr(error, "exit_code", 1))
                if error is exc:
                    raise
                raise error from exc
            status, code = runs.INTERRUPTED, 128 + sig
        finally:
            self._stop_reporting()
            self._kill_workers()
            self.observer.stop()
            self.router.close()
        return self._finish(status, code)

    def _run_agent(self) -> tuple[str, int]:
        from accel.launch.agent import AccelAgent, RunLogsSpecs

        if self.plan.nnodes > 1 and not self.plan.rdzv_is_host:
            rendezvous.wait_for_host(self.plan.rdzv_endpoint, self.timing, self.notify)
        self.handler = handler = _rendezvous_handler(self.plan)
        spec = _worker_spec(self.plan, handler)
        _quiet_torch_logs()
        router = self.router
        logs = RunLogsSpecs(
            router.stdout_fifos, router.stderr_fifos, self.error_dir, router.begin_attempt
        )
        agent = AccelAgent(spec, logs, hooks=self, grace=math.ceil(self.plan.grace_period))
        interrupted = False
        try:
            result = agent.run()
        except BaseException as exc:
            interrupted = _signal_of(exc) is not None or isinstance(exc, _Diverged)
            raise
        finally:
            if not interrupted:  # torch keeps the rendezvous open for the other nodes then
                with contextlib.suppress(Exception):
                    handler.shutdown()
        if result is not None and result.is_failed():
            return runs.FAILED, 1
        return runs.SUCCEEDED, 0

    # -- hooks called by the agent ----------------------------------------------------

    def rendezvous(self, waiting: bool) -> None:
        if not waiting:
            self._stop_reporting()
            return
        from accel.launch._torch_compat import rendezvous_participants

        handler = self.handler
        self.reporter = rendezvous.WaitReporter(
            self.plan.rdzv_endpoint,
            self.plan.nnodes,
            lambda: rendezvous_participants(handler),
            self.notify,
            self.timing.report,
        ).start()

    def _stop_reporting(self) -> None:
        if self.reporter is not None:
            self.reporter.stop()
            self.reporter = None

    def attempt_started(self, attempt: int, pids: Mapping[int, int]) -> None:
        self.attempt = attempt
        self.started = time.time()
        self.pids = dict(pids)
        self.exits.watch(pids)
        self.record = record.with_attempt(self.record, attempt, _now())
        self._save()
        self.observer.attempt_started(attempt, pids)

    def stopping(self) -> None:
        self.stop_times.setdefault(self.attempt, time.time())

    def attempt_failed(self, attempt: int, failures: Mapping[int, Any]) -> None:
        self._judge(attempt, failures)
        root = self.verdict.first
        left = self.plan.max_restarts - attempt
        if root is not None and left > 0:
            verb = "is stuck" if root.fate == "stuck" else "failed"
            self.notify(
                f"accel: rank {root.rank} {verb} ({root.summary}); restarting the workers "
                f"(restart {attempt + 1} of {self.plan.max_restarts})"
            )

    def tick(self) -> None:
        """Record what the watches found (run.json is written on this thread only)."""
        updated = self.observer.tick(self.record)
        if updated is not None:
            self.record = updated
            self._save()
        if self.observer.diverged is not None:
            raise _Diverged(self.observer.diverged.message)

    # -- blame --------------------------------------------------------------------------

    def _judge(self, attempt: int, failures: Mapping[int, Any], reason: str = BY_FAILURE) -> None:
        """Decide every rank's fate in ``attempt`` and record it (see accel.launch.blame)."""
        ends = _with_crashes(
            _rank_ends(attempt, failures, self.pids, self.exits), self.plan.run_dir, self.started
        )
        stop, clue = self._stop_of(attempt, reason)
        self.verdict = blame(ends, stop, clue)
        self.record = record.with_failures(self.record, attempt, self.verdict, stop)
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

    def _kill_workers(self) -> None:
        # Normally the agent has stopped them; after a second Ctrl-C it has not.
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def _finish(self, status: str, code: int) -> RunOutcome:
        if status == runs.INTERRUPTED and self.pids:
            self._judge(self.attempt, {}, BY_SIGNAL)
        verdict = self.verdict if status != runs.SUCCEEDED else Verdict(())
        self.record, status = self.observer.finish(self.record, status)
        if status == runs.INTERRUPTED:
            verdict = Verdict(())  # nobody to blame: the launcher was told to stop
        self.record = record.finished_record(
            self.record, status=status, exit_code=code, ended_at=_now(), verdict=verdict
        )
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
        )

    def _save(self) -> None:
        path = self.plan.run_dir / runs.RUN_FILE
        atomic_write_json(path, record.for_disk(self.record), durable=False, perms=PRIVATE_MODE)


# -- torch glue -------------------------------------------------------------------------


def _rendezvous_handler(plan: LaunchPlan) -> Any:
    import torch.distributed.elastic.rendezvous.registry as registry
    from torch.distributed.elastic.rendezvous import RendezvousParameters

    configs: dict[str, Any] = {"timeout": 900}
    if plan.nnodes > 1 and plan.rdzv_is_host is not None:
        configs["is_host"] = plan.rdzv_is_host
    params = RendezvousParameters(
        backend=plan.rdzv_backend,
        endpoint=plan.rdzv_endpoint,
        run_id=plan.rdzv_id,
        min_nodes=plan.nnodes,
        max_nodes=plan.nnodes,
        **configs,
    )
    return registry.get_rendezvous_handler(params)


def _worker_spec(plan: LaunchPlan, handler: Any) -> Any:
    from torch.distributed.elastic.agent.server.api import WorkerSpec

    return WorkerSpec(
        role="default",
        local_world_size=plan.nproc_per_node,
        entrypoint=plan.entrypoint,
        args=plan.worker_args,
        rdzv_handler=handler,
        max_restarts=plan.max_restarts,
        monitor_interval=0.1,
    )


def _rank_ends(
    attempt: int, failures: Mapping[int, Any], pids: Mapping[int, int], exits: ExitWatch
) -> list[RankFailure]:
    """How each rank of the attempt ended: torch's failures, with the exit watch's times.

    Ranks torch did not report (stopped before it looked, or in older torch versions)
    come from the exit watch alone; ranks that exited 0 are left out.
    """
    seen = exits.exits()
    out = []
    for rank in sorted(set(pids) | set(failures)):
        ended = seen.get(rank)
        failure = failures.get(rank)
        if failure is not None:
            out.append(_rank_failure(rank, failure, attempt, ended))
        elif ended is None or ended.exitcode != 0:
            out.append(
                RankFailure(
                    rank=rank,
                    local_rank=rank,
                    pid=pids.get(rank),
                    exitcode=ended.exitcode if ended else None,
                    attempt=attempt,
                    timestamp=ended.at if ended else time.time(),
                    died_at=ended.at if ended else None,
                )
            )
    return out


def _with_crashes(ends: list[RankFailure], run_dir: Path, since: float) -> list[RankFailure]:
    """Ranks killed by a fatal signal gain the stack faulthandler wrote, and its time.

    The dump is written the instant the rank crashed, before a core dump delays its
    end: that time, not the exit's, orders it before the errors it caused in peers.
    """
    from accel.hang import append_to_rank_logs, read_crash

    out = []
    for end in ends:
        crash = read_crash(run_dir, end.rank, since) if end.type is None else None
        if crash is not None and (end.exitcode is None or end.exitcode < 0):
            end = replace(end, raised_at=crash[0], traceback=crash[1])
            append_to_rank_logs(run_dir, {end.rank: crash[1]}, "fatal signal; Python stacks")
        out.append(end)
    return out


def _rank_failure(rank: int, failure: Any, attempt: int, ended: Any) -> RankFailure:
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    ours = data.get("accel") if isinstance(data.get("accel"), dict) else None
    theirs = data.get("message") if isinstance(data.get("message"), dict) else {}
    extra = theirs.get("extraInfo", {}) if isinstance(theirs, dict) else {}
    kind, message, trace = None, None, None
    if ours:
        kind, message, trace = ours.get("type"), ours.get("message"), ours.get("traceback")
    elif theirs:  # written by torch's @record in the script
        message, trace = theirs.get("message"), extra.get("py_callstack")
    stamp = ours.get("time") if ours else None
    raised = float(stamp) if isinstance(stamp, (int, float)) else None
    exitcode = int(failure.exitcode) if failure.exitcode is not None else None
    return RankFailure(
        rank=rank,
        local_rank=int(failure.local_rank),
        pid=int(failure.pid) if failure.pid is not None else None,
        exitcode=exitcode,
        attempt=attempt,
        timestamp=float(failure.timestamp),
        type=kind,
        message=message,
        traceback=trace,
        raised_at=raised,
        died_at=ended.at if ended is not None else None,
    )


def _launch_error(exc: BaseException, log: Path) -> BaseException:
    """A torch.distributed error before any worker ran (rendezvous): the user's to fix."""
    name = type(exc).__name__
    if not type(exc).__module__.startswith("torch.distributed"):
        return exc
    if name == "RendezvousTimeoutError":
        return JobFailed(f"the other nodes did not join the rendezvous in time ({exc}); see {log}")
    return JobFailed(f"the launch failed: {name}: {exc} (torch's messages: {log})")


@contextlib.contextmanager
def _native_stderr_to(path: Path) -> Iterator[None]:
    """Send what torch writes to file descriptor 2 into ``path`` for the run.

    torch's C++ side (c10d socket retries, store errors: stack traces of 40 frames)
    and its Python loggers write to the process's stderr, not through accel. The
    descriptor goes to the run's ``launcher.log``; accel's own lines keep the console
    through ``sys.stderr``, re-pointed at a copy of the original descriptor.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = os.dup(2)
    log = open_private_append(path)
    os.dup2(log, 2)
    os.close(log)
    console, previous = None, sys.stderr
    if _is_fd(previous, 2):
        console = os.fdopen(os.dup(saved), "w", buffering=1, errors="backslashreplace")
        sys.stderr = console
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        sys.stderr = previous
        os.dup2(saved, 2)
        os.close(saved)
        if console is not None:
            console.close()


def _is_fd(stream: Any, fd: int) -> bool:
    try:
        return bool(stream.fileno() == fd)
    except (AttributeError, OSError, ValueError):
        return False


def _signal_of(exc: BaseException) -> int | None:
    if isinstance(exc, _Signalled):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    sigval = getattr(exc, "sigval", None)  # torch's SignalException
    return int(sigval) if sigval is not None else None


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """Until torch installs its own handlers (they raise too), signals raise here."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Signalled(signum)

    old = {sig: signal.signal(sig, handler) for sig in HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def _worker_environ(plan: LaunchPlan) -> Iterator[None]:
    """torch's agent hands ``os.environ`` to the workers: set ours there, for the run only."""
    from accel.launch._torch_compat import agent_environment

    wanted = {
        **plan.worker_env,
        "ACCEL_LAUNCHER_PID": str(os.getpid()),
        "ACCEL_RUN_DIR": str(plan.run_dir),
        **agent_environment(HANDLED_SIGNALS, plan.max_restarts, os.environ),
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


def _quiet_torch_logs() -> None:
    """The agent's own log lines repeat what accel reports; LOGLEVEL brings them back."""
    if os.environ.get("LOGLEVEL"):
        return
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed.elastic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _facts(plan: LaunchPlan) -> dict[str, Any]:
    import torch

    from accel import __version__

    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "git_commit": _git_commit(plan.cwd),
        "accel_version": __version__,
        "torch_version": str(torch.__version__),
        "python_version": sys.version.split()[0],
    }


def _git_commit(cwd: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text else None


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="milliseconds")


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def wait_gone(pids: list[int], timeout: float) -> bool:
    """True once none of ``pids`` exists (tests and the CLI use it after a kill)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_exists(p) for p in pids):
            return True
        time.sleep(0.02)
    return not any(_exists(p) for p in pids)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
