"""Every private piece of torch the launcher relies on, for each supported torch release.

accel runs torch's own ``LocalElasticAgent`` and hooks a few of its private methods.
Their shapes changed between releases: accel used to override ``_shutdown`` as 2.13
shapes it, which crashed every launch on 2.8-2.11 and every restart on 2.6-2.7. So no
other module of accel touches a private torch name: they all go through here, and
``tests/launch/test_torch_contract.py`` checks the installed torch against
:func:`contract`, naming the symbol when a release changes it.

What differs across the supported range (read from each release's source):

====================================  ===================  ===========  ============
symbol                                2.6 - 2.7            2.8 - 2.11   2.12 - 2.15
====================================  ===================  ===========  ============
``LocalElasticAgent._shutdown``       (death_sig,          (death_sig)  (death_sig,
                                      is_restart); closes               timeout=30)
                                      the rendezvous
                                      unless is_restart
``LocalElasticAgent._stop_workers``   (wg, is_restart)     (wg)         (wg)
``LocalElasticAgent(shutdown_timeout=)``  no               no           yes
``TORCHELASTIC_SIGNALS_TO_HANDLE``    not read (2.6-2.9: the same four signals)  read
====================================  ===================  ===========  ============

accel overrides neither ``_shutdown`` nor ``_stop_workers``: the grace period is given
where every path ends, ``PContext.close`` (see :func:`close_with_grace`).

The same in every release, and relied on: ``_start_workers(wg) -> {local_rank: pid}``
(it sets ``_pcontext``), ``_monitor_workers(wg) -> RunResult``, ``_remaining_restarts``,
``PContext.close(death_sig, timeout)``, ``dynamic_rendezvous.get_method_name(depth=2)``
built on ``inspect.stack()``, ``dynamic_rendezvous._delay(seconds)`` (a random skew of
0-0.3 s before a node's join in the first round), ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``
(read by the c10d handler's ``use_agent_store``), the workers' environment handed to
``LogsSpecs.reify`` (accel.launch.agent), the error file (``TORCHELASTIC_ERROR_FILE``,
read into ``ProcessFailure``) and ``SubprocessContext.subprocess_handlers[local].proc.poll()``
as the one read of a worker's exit status (see :func:`tolerate_teardown`), and
``SimpleElasticAgent._invoke_run``'s ``time.sleep(monitor_interval)``, the one sleep of
``torch.distributed.elastic.agent.server.api`` (see :func:`wake_on_exit`), and what the
exit barrier reads (``_store``, ``_worker_group.group_world_size``,
``_exit_barrier_timeout``, ``agent_api._TERMINAL_STATE_SYNC_ID``, ``store_timeout``).

Imported only when launching: it imports torch.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.elastic.agent.server import api as agent_api
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from accel.launch._host import Signalled, signal_of, signals_while_stopping
from accel.launch.rendezvous import NEXT_ROUND, SPARE
from accel.launch.teardown import Returned, Teardown, TeardownJudge

# The releases this module knows; pyproject.toml declares the same range.
OLDEST = (2, 6)
NEWEST = (2, 15)

TORN = ".torn"  # suffix of a worker's error file that torch could not parse, set aside

BARRIER_SLICE = 1.0  # seconds of each wait of the exit barrier: a signal acts between two
BARRIER_QUIET = 3.0  # seconds into the exit barrier before the wait is said

# Environment variables torch reads (public names, private semantics).
SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"  # set for the workers: "True" or "False"
SIGNALS_ENV = "TORCHELASTIC_SIGNALS_TO_HANDLE"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


def release(version: str) -> tuple[int, int]:
    """``"2.11.0+cu130"`` -> ``(2, 11)``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(match.group(1)), int(match.group(2))


TORCH = release(str(torch.__version__))


@dataclass(frozen=True)
class Expectation:
    """One private torch symbol accel relies on, and what it must look like."""

    symbol: str
    params: tuple[str, ...]
    why: str


def contract(version: tuple[int, int]) -> tuple[Expectation, ...]:
    """Every private signature this module relies on in ``version`` (the contract test
    checks them; the attributes and variables are checked by behaviour there)."""
    agent = "torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent"
    pcontext = "torch.distributed.elastic.multiprocessing.api.PContext"
    return (
        Expectation(f"{agent}._start_workers", ("self", "worker_group"), "attempt_started"),
        Expectation(f"{agent}._monitor_workers", ("self", "worker_group"), "failures, ticks"),
        Expectation(f"{pcontext}.close", ("self", "death_sig", "timeout"), "grace period"),
        Expectation(
            "torch.distributed.elastic.agent.server.api.SimpleElasticAgent._rendezvous",
            ("self", "worker_group"),
            "say how many nodes are missing while waiting",
        ),
        Expectation(
            "torch.distributed.elastic.rendezvous.dynamic_rendezvous.get_method_name",
            ("depth",),
            "replaced: inspect.stack() costs a second per launch",
        ),
        Expectation(
            "torch.distributed.elastic.rendezvous.dynamic_rendezvous._delay",
            ("seconds",),
            "replaced: a lone node skips the random skew before its join (0-0.3 s)",
        ),
        Expectation(
            "torch.distributed.elastic.agent.server.api.SimpleElasticAgent._exit_barrier",
            ("self",),
            "replaced: the end-of-run wait for other nodes is said, and a signal acts",
        ),
        Expectation(
            "torch.distributed.elastic.utils.store._barrier_nonblocking",
            ("store", "world_size", "key_prefix"),
            "the exit barrier's arrival (its key, then waited on in slices)",
        ),
        Expectation(
            "torch.distributed.elastic.rendezvous.utils._matches_machine_hostname",
            ("host",),
            "whether this node hosts the rendezvous when no --node-rank says",
        ),
    )


# -- the agent ---------------------------------------------------------------------------


class CompatAgent(LocalElasticAgent):  # type: ignore[misc]
    """``LocalElasticAgent`` with release-independent hooks and accel's grace period.

    Subclasses override :meth:`workers_started` and :meth:`workers_monitored`, never
    torch's private methods.
    """

    def __init__(
        self, spec: Any, logs_specs: Any, *, grace: int, ended: threading.Event | None = None
    ) -> None:
        super().__init__(spec, logs_specs)
        self._accel_grace = grace
        wake_on_exit(ended)

    @property
    def restart_count(self) -> int:
        """torch's own count (what the workers get as TORCHELASTIC_RESTART_COUNT)."""
        spec = self.get_worker_group().spec
        return int(spec.max_restarts - self._remaining_restarts)

    def workers_started(self, worker_group: Any, pids: dict[int, Any]) -> None:
        """Workers of the current attempt run: ``local rank -> pid``."""

    def workers_monitored(self, result: Any) -> None:
        """Every monitor tick, with torch's ``RunResult``."""

    def workers_stopping(self, death_sig: signal.Signals | None) -> None:
        """accel is about to signal the workers to stop (on any of torch's paths), with
        ``death_sig`` (torch's: the launcher's signal, or None for its default)."""

    def worker_teardown(self, ended: Teardown) -> None:
        """A worker (``ended.rank``: its local rank) finished, then hung or died in teardown."""

    def worker_returned(self, local_rank: int, returned: Returned) -> None:
        """The script of ``local_rank``'s worker returned or exited (seen once, by the judge)."""

    def rendezvous_waiting(self, waiting: bool) -> None:
        """The rendezvous begins (``True``) or is over (``False``)."""

    def _rendezvous(self, worker_group: Any) -> None:
        self.rendezvous_waiting(True)
        try:
            super()._rendezvous(worker_group)
        finally:
            self.rendezvous_waiting(False)

    def _start_workers(self, worker_group: Any) -> dict[int, Any]:
        pids: dict[int, Any] = super()._start_workers(worker_group)
        judge = TeardownJudge(float(self._accel_grace), self.worker_teardown, self.worker_returned)

        def stopping(death_sig: signal.Signals | None) -> None:
            judge.stopping(death_sig)  # from now on, a worker's end may be accel's signal
            self.workers_stopping(death_sig)

        close_with_grace(self._pcontext, self._accel_grace, before=stopping)
        tolerate_teardown(self._pcontext, judge)
        self.workers_started(worker_group, pids)
        return pids

    def exit_barrier_waiting(self, nodes: int, timeout: float) -> None:
        """This node's workers are done and it waits for the other nodes' (torch's exit
        barrier, up to ``timeout`` seconds)."""

    def _exit_barrier(self) -> None:
        """torch's barrier at the end of a run (every node's agent waits until all have
        finished, up to ``exit_barrier_timeout``, 300 s: it keeps node 0's store up for
        the others) waited in one blocking ``store.wait``: silent, and a SIGTERM acted
        only once it returned. The same barrier, waited on in short slices: said after a
        moment, and a signal acts at once."""
        from torch.distributed.elastic.utils import store as store_util

        store: Any = self._store
        nodes = int(self._worker_group.group_world_size or 1)
        timeout = float(self._exit_barrier_timeout)
        self._in_exit_barrier = True  # torch's health check: alive while it waits
        try:
            key = store_util._barrier_nonblocking(store, nodes, agent_api._TERMINAL_STATE_SYNC_ID)
            start, said = time.monotonic(), False
            while True:
                began = time.monotonic()
                try:
                    with store_util.store_timeout(store, BARRIER_SLICE):
                        store.wait([key])
                    return
                except Exception as exc:
                    if signal_of(exc) is not None:
                        raise  # a signal's (torch's handlers raise): it stops the launcher
                    now = time.monotonic()
                    if now - began < BARRIER_SLICE / 2 or now - start >= timeout:
                        return  # not a slice's timeout (the store is gone), or the whole
                if not said and now - start >= BARRIER_QUIET:
                    said = True
                    self.exit_barrier_waiting(nodes, timeout)
        except Exception as exc:
            if signal_of(exc) is not None:
                raise
        finally:
            self._in_exit_barrier = False

    def _monitor_workers(self, worker_group: Any) -> Any:
        while True:
            try:
                result = super()._monitor_workers(worker_group)
                break
            except (ValueError, RecursionError):  # json's, from torch reading an error file
                if not set_aside_torn_error_files(self._pcontext):
                    raise
        self.workers_monitored(result)
        return result


def set_aside_torn_error_files(pcontext: Any) -> bool:
    """Rename every worker error file that is not JSON to ``<name>.torn``; True if any.

    torch parses a failed worker's ``TORCHELASTIC_ERROR_FILE`` when it finds the worker
    gone and raises on one that does not parse, which ended the launcher with an internal
    error: a worker stopped while it wrote the file (torch's ``@record`` writes it in
    place) leaves it empty or cut short. Set aside, the worker is reported by its exit
    code, and the poll that raised is run again (it had not yet counted that worker).
    """
    moved = False
    for path in dict(getattr(pcontext, "error_files", None) or {}).values():
        try:
            with open(path, encoding="utf-8") as fh:
                json.load(fh)
        except FileNotFoundError:
            continue
        except (OSError, ValueError, RecursionError):  # nested deeper than json reads
            with contextlib.suppress(OSError):
                os.replace(path, f"{path}{TORN}")
                moved = True
    return moved


def close_with_grace(
    pcontext: Any, grace: int, before: Callable[[signal.Signals | None], None] | None = None
) -> None:
    """Every close of ``pcontext`` waits ``grace`` seconds before SIGKILL, or until a Ctrl-C.

    torch waits a fixed 30 s for a worker that ignores the stop signal, and closes the
    workers on several paths: the poll that finds a failed rank (``self.close()``, every
    release), ``_stop_workers`` (``_shutdown()``), a signal (``_shutdown(sig)``; only
    2.12+ takes a timeout there). Whatever timeout a path passes, accel's
    ``launch.stop_grace_period`` holds on all of them. A signal during the wait does not
    start it again (torch's handler would raise, and its agent close once more): a
    Ctrl-C kills the workers at once (:func:`accel.launch._host.signals_while_stopping`),
    and a signal that came while stopping for another reason ends the run once they are
    gone, as it would have without the wait.
    """
    close = pcontext.close

    def close_after_grace(death_sig: signal.Signals | None = None, timeout: Any = None) -> None:
        with signals_while_stopping(lambda: pcontext.pids().values()) as came:
            if before is not None:
                before(death_sig)  # the one door every stop goes through: when it was opened
            close(death_sig, grace)
        ending = sys.exc_info()[1]  # torch closes inside its `except SignalException`
        if came and (ending is None or signal_of(ending) is None):
            raise Signalled(came[0])  # not already ending on a signal: end on this one

    pcontext.close = close_after_grace


# -- the monitor -----------------------------------------------------------------------------


class _Time:
    """torch's agent module's ``time``, whose sleep an end cuts short (:func:`wake_on_exit`)."""

    ended: threading.Event | None = None

    def sleep(self, seconds: float) -> None:
        ended = self.ended
        if ended is None:
            time.sleep(seconds)
        elif ended.wait(seconds):
            ended.clear()  # an end after this is seen by the check that follows anyway

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


AGENT_TIME = _Time()
TORCH_AGENT_TIME = getattr(agent_api, "time", None)  # torch's, kept (the contract test)


def wake_on_exit(ended: threading.Event | None) -> None:
    """The agent sees a worker end when it ends, not at its next check.

    torch's agent sleeps ``monitor_interval`` (0.1 s) between two checks of its workers
    (``_invoke_run``): a worker that crashed waited 0.05 s on average, and up to 0.1 s,
    before its peers were stopped and the restart began. The sleep now waits on
    ``ended`` (set by :class:`accel.launch.deaths.ExitWatch`, whose threads the kernel
    wakes at each worker's end), for at most the same interval; None: torch's sleep.
    """
    if TORCH_AGENT_TIME is time:
        agent_api.time = AGENT_TIME  # type: ignore[attr-defined,assignment]
    AGENT_TIME.ended = ended


def wait_on_pidfd(proc: Any) -> None:
    """``proc.wait(timeout)`` returns when the process ends, not at the next of Popen's
    polls, which back off to one every 50 ms: torch waits so for each worker it stops."""
    wait = proc.wait

    def waited(timeout: float | None = None) -> Any:
        if timeout is not None and proc.returncode is None:
            deadline = time.monotonic() + timeout
            try:
                fd = os.pidfd_open(proc.pid)
            except (AttributeError, OSError):  # Linux before 5.3; a pid already reaped
                return wait(timeout)
            try:
                poller = select.poll()
                poller.register(fd, select.POLLIN)  # readable once the process ended
                poller.poll(max(0.0, timeout) * 1000)
            finally:
                os.close(fd)
            timeout = max(0.0, deadline - time.monotonic())
        return wait(timeout)

    proc.wait = waited


def tolerate_teardown(pcontext: Any, judge: TeardownJudge) -> None:
    """torch reads each worker's exit status through ``judge`` (``Popen.poll``, its only
    read of it): a worker whose script returned has the script's result (see
    :mod:`accel.launch.teardown`). A context without subprocesses is left as it is."""
    handlers = getattr(pcontext, "subprocess_handlers", None) or {}
    for local, handler in handlers.items():
        error_file = str(pcontext.error_files[local])

        def judged(
            poll: Callable[[], int | None] = handler.proc.poll,
            local: int = local,
            error_file: str = error_file,
        ) -> int | None:
            return judge.exitcode(local, error_file, poll())

        handler.proc.poll = judged
        wait_on_pidfd(handler.proc)


# -- the rendezvous --------------------------------------------------------------------------


def _method_name(depth: int = 2) -> str:
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:
        return "no_method_name"


# torch's own, kept before it is replaced (the contract test compares the two).
TORCH_GET_METHOD_NAME = getattr(dynamic_rendezvous, "get_method_name", None)


def speed_up_rendezvous_events() -> None:
    """Name rendezvous events without ``inspect.stack()``.

    torch names each event with ``inspect.stack()``, which reads the source of every
    frame on the stack, twice per event: about a second of a launch's start-up behind a
    CLI's deep stack. The frame's function name is all it keeps; this gets it directly.
    """
    current = TORCH_GET_METHOD_NAME
    if callable(current) and list(inspect.signature(current).parameters) == ["depth"]:
        dynamic_rendezvous.get_method_name = _method_name


TORCH_DELAY = getattr(dynamic_rendezvous, "_delay", None)
JOIN_SKEW = (0, 0.3)  # next_rendezvous()'s, in every supported release
_one_node = False  # this launcher's job has one node (skip_join_skew)


def _delay(seconds: float | tuple[float, float]) -> None:
    if _one_node and seconds == JOIN_SKEW:
        return  # the skew spreads many nodes' joins over time: one node has none to spread
    TORCH_DELAY(seconds=seconds)  # type: ignore[misc]


def skip_join_skew(one_node: bool) -> None:
    """A job of one node joins its rendezvous at once.

    torch sleeps a random 0 to 0.3 s before each node's join while the rendezvous is in
    its first round, which it stays in across the restarts of a one-node job: that skew
    was 0.10 to 0.29 s of every start and every restart, to spread the joins of nodes
    that a one-node job does not have. Other jobs keep it, and every other delay is
    torch's (2.15's random backoff after a failed state write is a tuple too).
    """
    global _one_node
    _one_node = one_node
    current = TORCH_DELAY
    if callable(current) and list(inspect.signature(current).parameters) == ["seconds"]:
        dynamic_rendezvous._delay = _delay  # type: ignore[attr-defined]


def agent_environment(
    signals: Sequence[signal.Signals], restarts: bool, env: Mapping[str, str]
) -> dict[str, str]:
    """What the launcher sets in its own environment for torch's agent to read.

    ``restarts``: whether the workers may start more than once (max_restarts > 0, or an
    elastic job, restarted whenever a node joins).
    """
    wanted = {SIGNALS_ENV: ",".join(s.name for s in signals)}  # 2.6-2.9: always these
    if restarts and SHARE_STORE_ENV not in env:
        # The agent's shared TCPStore outlives an attempt, and torch does not prefix the
        # workers' keys per attempt: restarted gloo ranks would dial their predecessors'
        # stale addresses. Rank 0 of each attempt hosts a fresh store instead.
        wanted[SHARE_STORE_ENV] = "1"
    return wanted


def rendezvous_participants(handler: Any) -> int | None:
    """Nodes that have joined the c10d rendezvous so far, None when torch does not say.

    The dynamic handler's last synced state (``_state_holder.state.participants``, the
    same in every supported release), read defensively: a torch that renamed it only
    loses the count in accel's waiting message.
    """
    try:
        return len(handler._state_holder.state.participants)
    except Exception:  # noqa: BLE001 - any release, any state
        return None


# A key a spare node sets in the rendezvous' store once it has seen the job end (below).
SPARE_LEFT_KEY = "accel.spare-left"


def rendezvous_role(handler: Any) -> str | None:
    """How this node waits in the rendezvous of a job that runs without it:
    :data:`SPARE`, :data:`NEXT_ROUND`, or None (it is one of the round's nodes, or torch
    does not say). The dynamic handler's node and last synced state, the same in every
    supported release; read defensively, like the count."""
    try:
        node, state = handler._this_node, handler._state_holder.state
        if node in state.redundancy_list:
            return SPARE
        return NEXT_ROUND if node in state.wait_list else None
    except Exception:  # noqa: BLE001 - any release, any state
        return None


def rendezvous_is_spare(handler: Any) -> bool:
    """Whether this node waits as a spare (:func:`rendezvous_role`)."""
    return rendezvous_role(handler) == SPARE


def spare_left(handler: Any) -> None:
    """On a spare that torch let go when the job ended (``RendezvousGracefulExitError``):
    tell the node that hosts the rendezvous, which waits for it before it exits."""
    with contextlib.suppress(Exception):
        handler._store.set(_spare_key(handler, handler._this_node), "1")


def rendezvous_spares(handler: Any) -> list[Any]:
    """The spare nodes of the last synced state (none when torch does not say)."""
    try:
        return list(handler._state_holder.state.redundancy_list)
    except Exception:  # noqa: BLE001 - any release, any state
        return []


def wait_for_spares(handler: Any, spares: Sequence[Any], timeout: float) -> None:
    """On a node whose job ended: wait, at most ``timeout``, until each of ``spares`` has
    seen it end. torch tells a spare only through the rendezvous' store, which goes with
    the node that hosts it: a spare that polled after that lost the store and failed,
    instead of ending with the job."""
    from datetime import timedelta

    with contextlib.suppress(Exception):  # a spare of another launcher never says
        handler._store.wait(
            [_spare_key(handler, node) for node in spares], timedelta(seconds=timeout)
        )


def _spare_key(handler: Any, node: Any) -> str:
    return f"{SPARE_LEFT_KEY}.{handler._settings.run_id}.{node}"


def may_host(endpoint_host: str) -> bool:
    """Whether torch's c10d rendezvous, not told ``is_host``, tries to host the store here:
    when ``endpoint_host`` names this machine (torch's own test, the same 2.6-2.15)."""
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    return bool(_matches_machine_hostname(endpoint_host))
