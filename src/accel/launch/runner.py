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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from accel import runs
from accel._redact import secret_values
from accel.errors import JobFailed
from accel.fsutil import PRIVATE_MODE, atomic_write_json
from accel.launch import record
from accel.launch.guard import Guard
from accel.launch.logs import ConsoleSink, LogRouter
from accel.launch.observe import RunObserver
from accel.launch.plan import LaunchPlan
from accel.launch.record import RankFailure

if TYPE_CHECKING:
    from accel.workspace import Workspace

Notify = Callable[[str], None]
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class RunOutcome:
    """How the run ended; ``exit_code`` is what ``accel launch`` exits with."""

    run_id: str
    run_dir: Path
    status: str
    exit_code: int
    restarts: int
    root: RankFailure | None
    collateral_ranks: tuple[int, ...] = ()
    tails: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


class _Signalled(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def launch(
    plan: LaunchPlan,
    ws: Workspace,
    *,
    sink: ConsoleSink | None = None,
    notify: Notify | None = None,
) -> RunOutcome:
    """Run the plan to its end; the caller turns the outcome into an exit code."""
    ws.ensure()
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
        self.failures: list[RankFailure] = []
        self.error_dir = scratch / "errors"
        secrets = secret_values({**os.environ, **plan.worker_env})
        self.router = LogRouter(
            plan.run_dir, scratch, plan.nproc_per_node, sink, self._show, secrets=secrets
        )
        self.observer = RunObserver(plan, lambda: dict(self.pids), self.router.last_output, notify)

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
            with _signals_raise(), _worker_environ(self.plan):
                status, code = self._run_agent()
        except _Signalled as exc:
            status, code = runs.INTERRUPTED, 128 + exc.signum
        except BaseException as exc:
            sig = _signal_of(exc)
            if sig is None:
                self._finish(runs.FAILED, 1)
                if type(exc).__module__.startswith("torch.distributed"):
                    # rendezvous timeouts, a node that never came: the user's to fix
                    raise JobFailed(f"the launch failed: {type(exc).__name__}: {exc}") from exc
                raise
            status, code = runs.INTERRUPTED, 128 + sig
        finally:
            self._kill_workers()
            self.observer.stop()
            self.router.close()
        return self._finish(status, code)

    def _run_agent(self) -> tuple[str, int]:
        from accel.launch.agent import AccelAgent, RunLogsSpecs

        handler = _rendezvous_handler(self.plan)
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
            interrupted = _signal_of(exc) is not None
            raise
        finally:
            if not interrupted:  # torch keeps the rendezvous open for the other nodes then
                with contextlib.suppress(Exception):
                    handler.shutdown()
        if result is not None and result.is_failed():
            return runs.FAILED, 1
        return runs.SUCCEEDED, 0

    # -- hooks called by the agent ----------------------------------------------------

    def attempt_started(self, attempt: int, pids: Mapping[int, int]) -> None:
        self.pids = dict(pids)
        self.record = record.with_attempt(self.record, attempt, _now())
        self._save()
        self.observer.attempt_started(attempt, pids)

    def attempt_failed(self, attempt: int, failures: Mapping[int, Any]) -> None:
        self.failures = [_rank_failure(r, f, attempt) for r, f in sorted(failures.items())]
        self.failures = self.observer.hang_failures(attempt, self.failures)
        self.record = record.with_failures(self.record, attempt, self.failures)
        self._save()
        root = record.first_failure(self.failures)
        left = self.plan.max_restarts - attempt
        if root is not None and left > 0:
            self.notify(
                f"rank {root.rank} failed ({root.summary}); restarting the workers "
                f"(restart {attempt + 1} of {self.plan.max_restarts})"
            )

    def tick(self) -> None:
        """Record what the hang watch found (run.json is written on this thread only)."""
        updated = self.observer.tick(self.record)
        if updated is not None:
            self.record = updated
            self._save()

    # -- end ----------------------------------------------------------------------------

    def _kill_workers(self) -> None:
        # Normally the agent has stopped them; after a second Ctrl-C it has not.
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def _finish(self, status: str, code: int) -> RunOutcome:
        failures = self.failures if status == runs.FAILED else []
        self.record, status = self.observer.finish(self.record, status)
        self.record = record.finished_record(
            self.record,
            status=status,
            exit_code=code,
            ended_at=_now(),
            failures=failures,
            ranks=list(self.pids),
        )
        self._save()
        root = record.first_failure(failures)
        return RunOutcome(
            run_id=self.plan.run_id,
            run_dir=self.plan.run_dir,
            status=status,
            exit_code=code,
            restarts=int(self.record.get("restarts", 0)),
            root=root,
            collateral_ranks=tuple(self.record.get("collateral_ranks", ())),
            tails={r: tuple(self.router.tail(r)) for r in self.pids},
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


def _rank_failure(rank: int, failure: Any, attempt: int) -> RankFailure:
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
    return RankFailure(
        rank=rank,
        local_rank=int(failure.local_rank),
        pid=int(failure.pid) if failure.pid is not None else None,
        exitcode=int(failure.exitcode) if failure.exitcode is not None else None,
        attempt=attempt,
        timestamp=float(stamp if isinstance(stamp, (int, float)) else failure.timestamp),
        type=kind,
        message=message,
        traceback=trace,
    )


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
