"""Every private piece of torch the launcher relies on, for each supported torch release.

accel runs torch's own ``LocalElasticAgent`` and hooks a few of its private methods;
their shapes changed between releases (torch 2.11's ``_shutdown`` takes no timeout,
and overriding it as 2.13 shapes it crashed every launch). So no other module of accel
touches a private torch name: they all go through here, each with what every release of
the supported range does, and ``tests/launch/test_torch_contract.py`` checks the
installed torch against :data:`CONTRACT`, naming the symbol when a release changes it.

What differs across the supported range (read from each release's source):

=====================================  ==================  ============  =============
symbol                                 2.6 - 2.7           2.8 - 2.11    2.12 - 2.15
=====================================  ==================  ============  =============
``LocalElasticAgent._shutdown``        (death_sig,         (death_sig)   (death_sig,
                                       is_restart);                      timeout=30)
                                       closes the
                                       rendezvous unless
                                       is_restart
``LocalElasticAgent._stop_workers``    (wg, is_restart)    (wg)          (wg)
``LocalElasticAgent(shutdown_timeout)``  no                no            yes (public)
``TORCHELASTIC_SIGNALS_TO_HANDLE``     ignored (the same   ignored       read
                                       four signals)       (2.10: read)
=====================================  ==================  ============  =============

The same in every release: ``_start_workers(wg) -> {local_rank: pid}``,
``_monitor_workers(wg) -> RunResult``, ``_remaining_restarts``, ``_pcontext`` (a
``PContext`` whose ``close(death_sig, timeout)`` SIGKILLs what outlives ``timeout``),
``dynamic_rendezvous.get_method_name(depth=2)`` built on ``inspect.stack()``,
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` (read by the c10d handler's ``use_agent_store``),
and the error file (``TORCHELASTIC_ERROR_FILE``, read into ``ProcessFailure``).

Imported only when launching: it imports torch.
"""

from __future__ import annotations

import inspect
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

# The releases this module knows; pyproject.toml declares the same range.
OLDEST = (2, 6)
NEWEST = (2, 15)

# Environment variables torch reads (public names, private semantics).
SHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
SIGNALS_ENV = "TORCHELASTIC_SIGNALS_TO_HANDLE"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"


def release(version: str) -> tuple[int, int]:
    """``"2.11.0+cu130"`` -> ``(2, 11)``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(match.group(1)), int(match.group(2))


TORCH = release(str(torch.__version__))


# -- the contract: what each release's private methods look like ---------------------------


def shutdown_params(version: tuple[int, int]) -> tuple[str, ...]:
    """The parameters of ``LocalElasticAgent._shutdown`` in ``version``."""
    if version < (2, 8):
        return ("self", "death_sig", "is_restart")
    if version < (2, 12):
        return ("self", "death_sig")
    return ("self", "death_sig", "timeout")


def stop_workers_params(version: tuple[int, int]) -> tuple[str, ...]:
    """The parameters of ``LocalElasticAgent._stop_workers`` in ``version``."""
    if version < (2, 8):
        return ("self", "worker_group", "is_restart")
    return ("self", "worker_group")


def takes_shutdown_timeout(version: tuple[int, int]) -> bool:
    """Whether ``LocalElasticAgent(..., shutdown_timeout=)`` exists (2.12 on)."""
    return version >= (2, 12)


@dataclass(frozen=True)
class Expectation:
    """One private torch symbol accel relies on, and what it must look like."""

    symbol: str
    params: tuple[str, ...] | None = None  # None: only that it exists
    why: str = ""


def contract(version: tuple[int, int]) -> tuple[Expectation, ...]:
    """Everything this module relies on in ``version`` (checked by the contract test)."""
    agent = "torch.distributed.elastic.agent.server.local_elastic_agent.LocalElasticAgent"
    return (
        Expectation(f"{agent}._shutdown", shutdown_params(version), "grace period on stop"),
        Expectation(f"{agent}._stop_workers", stop_workers_params(version), "calls _shutdown"),
        Expectation(f"{agent}._start_workers", ("self", "worker_group"), "attempt_started"),
        Expectation(f"{agent}._monitor_workers", ("self", "worker_group"), "failures, ticks"),
        Expectation(
            "torch.distributed.elastic.rendezvous.dynamic_rendezvous.get_method_name",
            ("depth",),
            "replaced: inspect.stack() costs a second per launch",
        ),
    )


# -- the agent ---------------------------------------------------------------------------


class CompatAgent(LocalElasticAgent):  # type: ignore[misc]
    """``LocalElasticAgent`` with release-independent hooks and accel's grace period.

    Subclasses override :meth:`workers_started` and :meth:`workers_monitored`, never
    torch's private methods.
    """

    def __init__(self, spec: Any, logs_specs: Any, *, grace: int) -> None:
        extra: dict[str, Any] = {"shutdown_timeout": grace} if takes_shutdown_timeout(TORCH) else {}
        super().__init__(spec, logs_specs, **extra)
        self._accel_grace = grace

    @property
    def restart_count(self) -> int:
        """torch's own count (what the workers get as TORCHELASTIC_RESTART_COUNT)."""
        spec = self.get_worker_group().spec
        return int(spec.max_restarts - self._remaining_restarts)

    def workers_started(self, worker_group: Any, pids: dict[int, Any]) -> None:
        """Workers of the current attempt run: ``local rank -> pid``."""

    def workers_monitored(self, result: Any) -> None:
        """Every monitor tick, with torch's ``RunResult``."""

    def _start_workers(self, worker_group: Any) -> dict[int, Any]:
        pids: dict[int, Any] = super()._start_workers(worker_group)
        self.workers_started(worker_group, pids)
        return pids

    def _monitor_workers(self, worker_group: Any) -> Any:
        result = super()._monitor_workers(worker_group)
        self.workers_monitored(result)
        return result

    def _shutdown(
        self, death_sig: signal.Signals = signal.SIGTERM, *args: Any, **kwargs: Any
    ) -> None:
        # torch waits a fixed 30 s for a rank that ignores the signal (on every path, in
        # every release); accel waits launch.stop_grace_period, then SIGKILLs. 2.6-2.7
        # also pass is_restart (the rendezvous stays open on a restart): it goes on.
        if takes_shutdown_timeout(TORCH):  # 2.12+: what torch passes is only its timeout
            super()._shutdown(death_sig, timeout=self._accel_grace)
            return
        if self._pcontext is not None:
            # 2.6-2.11: no timeout to give; stop the workers with ours first, and
            # torch's own close finds them gone.
            self._pcontext.close(death_sig, self._accel_grace)
        super()._shutdown(death_sig, *args, **kwargs)


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


def agent_environment(
    signals: Sequence[signal.Signals], max_restarts: int, env: Mapping[str, str]
) -> dict[str, str]:
    """What the launcher sets in its own environment for torch's agent to read."""
    wanted = {SIGNALS_ENV: ",".join(s.name for s in signals)}  # 2.6-2.9: always these
    if max_restarts > 0 and SHARE_STORE_ENV not in env:
        # The agent's shared TCPStore outlives an attempt, and torch does not prefix the
        # workers' keys per attempt: restarted gloo ranks would dial their predecessors'
        # stale addresses. Rank 0 of each attempt hosts a fresh store instead.
        wanted[SHARE_STORE_ENV] = "1"
    return wanted
