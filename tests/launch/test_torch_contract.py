"""The installed torch still looks the way accel/launch/_torch_compat.py says it does.

Every private torch symbol the launcher relies on is checked here, for whichever torch
release runs the suite (CI runs it on the oldest and the newest supported ones too). A
failure names the symbol and what changed, so a new torch release is a one-line diagnosis
instead of a crash in every user's launch.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.elastic.agent.server.api import WorkerSpec
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous
from torch.distributed.elastic.rendezvous import registry as rdzv_registry

from accel.launch import _torch_compat as compat
from accel.launch.plan import BOOTSTRAP

# On the oldest supported torch too (.ci/run): this leans on torch's internals.
pytestmark = pytest.mark.edge

ROOT = Path(__file__).resolve().parents[2]
VERSION = f"torch {torch.__version__}"
FIX = "update src/accel/launch/_torch_compat.py for this release"


def _resolve(symbol: str) -> Any:
    """``a.b.C.meth`` -> the object, importing the longest module prefix."""
    parts = symbol.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(symbol)


def _params(fn: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


@pytest.mark.parametrize("expected", compat.contract(compat.TORCH), ids=lambda e: e.symbol)
def test_every_private_symbol_is_there_with_its_signature(expected: compat.Expectation) -> None:
    try:
        found = _resolve(expected.symbol)
    except (ImportError, AttributeError):
        pytest.fail(f"{VERSION}: {expected.symbol} is gone (accel uses it: {expected.why}); {FIX}")
    params = _params(found)
    assert params == expected.params, (
        f"{VERSION} changed {expected.symbol}({', '.join(params)}): accel expects "
        f"({', '.join(expected.params)}) ({expected.why}); {FIX}"
    )


def test_the_installed_torch_is_in_the_range_accel_knows() -> None:
    oldest, newest = compat.OLDEST, compat.NEWEST
    assert oldest <= compat.TORCH <= newest, (
        f"{VERSION} is outside the range accel/launch/_torch_compat.py was written for "
        f"({oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}): read its private methods, "
        "widen the table there and the torch requirement in pyproject.toml"
    )


def test_pyproject_declares_exactly_the_range_the_adapter_knows() -> None:
    (torch_req,) = re.findall(
        r'^\s*"(torch[<>=!~,.\d\s]*)",', (ROOT / "pyproject.toml").read_text(), re.M
    )
    oldest, newest = compat.OLDEST, compat.NEWEST
    assert torch_req == f"torch>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}"


def test_release_parses_local_and_pre_release_versions() -> None:
    assert compat.release("2.11.0+cu130") == (2, 11)
    assert compat.release("2.6.0") == (2, 6)
    assert compat.release("2.16.0.dev20270101") == (2, 16)
    with pytest.raises(ValueError, match="not a torch version"):
        compat.release("nightly")


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real c10d rendezvous handler hosting its store on a free port."""

    def make() -> Any:
        params = RendezvousParameters(
            backend="c10d",
            endpoint="localhost:0",
            run_id="contract",
            min_nodes=1,
            max_nodes=1,
            is_host=True,
        )
        made = rdzv_registry.get_rendezvous_handler(params)
        handlers.append(made)
        return made

    handlers: list[Any] = []
    yield make
    for made in handlers:
        made.shutdown()


@pytest.mark.timeout(60)
def test_the_spare_state_accel_reads_and_the_key_it_sets_are_torchs(handler: Any) -> None:
    # A spare node is told it waits as one, and the node hosting the rendezvous waits for
    # it to see the job end, through the handler's node, state and store.
    made = handler()
    assert not compat.rendezvous_is_spare(made) and compat.rendezvous_spares(made) == []
    state = made._state_holder.state
    assert isinstance(state.redundancy_list, set), f"{VERSION}: redundancy_list; {FIX}"
    state.redundancy_list.add(made._this_node)  # as torch's join puts a spare there
    assert compat.rendezvous_is_spare(made), f"{VERSION}: _this_node / redundancy_list; {FIX}"
    spares = compat.rendezvous_spares(made)
    assert spares == [made._this_node]
    started = time.monotonic()
    compat.spare_left(made)  # the spare says it saw the end ...
    compat.wait_for_spares(made, spares, timeout=30)  # ... so the host's wait returns
    assert time.monotonic() - started < 25, f"{VERSION}: the handler's _store; {FIX}"
    state.redundancy_list.discard(made._this_node)
    state.wait_list.add(made._this_node)  # as torch's join puts a node for the next round
    assert compat.rendezvous_role(made) == compat.NEXT_ROUND, f"{VERSION}: wait_list; {FIX}"
    state.wait_list.discard(made._this_node)


@pytest.mark.timeout(60)
def test_agent_state_accel_reads_exists_after_construction(handler: Any, tmp_path: Path) -> None:
    spec = WorkerSpec(
        role="default",
        local_world_size=1,
        entrypoint="/bin/true",
        args=(),
        rdzv_handler=handler(),
        max_restarts=3,
    )
    agent = compat.CompatAgent(spec, DefaultLogsSpecs(log_dir=str(tmp_path)), grace=1)
    assert agent.restart_count == 0, f"{VERSION}: LocalElasticAgent._remaining_restarts; {FIX}"
    assert hasattr(agent, "_pcontext") and agent._pcontext is None, (
        f"{VERSION}: LocalElasticAgent._pcontext is gone (accel closes the workers with its "
        f"grace period through it); {FIX}"
    )


def _terminated(*_: Any) -> None:
    """torch's own handler in the launcher (PContext's): a SignalException."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    raise SignalException("SIGTERM", signal.SIGTERM)


@pytest.mark.timeout(60)
def test_the_exit_barrier_is_said_and_a_signal_ends_it_at_once(
    handler: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch's own barrier waited up to 300 s in one blocking call, silent: a node whose
    # peer was stopped sat there, and its SIGTERM acted only after (a scheduler's kill).
    from torch.distributed import TCPStore
    from torch.distributed.elastic.agent.server import api as agent_api
    from torch.distributed.elastic.utils import store as store_util

    spec = WorkerSpec(
        role="default", local_world_size=1, entrypoint="/bin/true", args=(),
        rdzv_handler=handler(), max_restarts=0,
    )  # fmt: skip
    agent = compat.CompatAgent(spec, DefaultLogsSpecs(log_dir=str(tmp_path)), grace=1)
    assert agent._exit_barrier_timeout == 300, f"{VERSION}: _exit_barrier_timeout; {FIX}"
    agent._store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    agent._worker_group.group_world_size = 2  # the other node has not come
    said: list[tuple[int, float]] = []
    monkeypatch.setattr(compat, "BARRIER_QUIET", 0.0)
    monkeypatch.setattr(agent, "exit_barrier_waiting", lambda *args: said.append(args))
    previous = signal.signal(signal.SIGALRM, _terminated)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.5)  # the scheduler's SIGTERM, as it were
        with pytest.raises(Exception, match="SIGTERM") as stopped:
            agent._exit_barrier()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert said == [(2, 300.0)] and compat.signal_of(stopped.value) == signal.SIGTERM
    # the other node arrives (torch's own arrival): the barrier is done at once
    store_util._barrier_nonblocking(agent._store, 2, agent_api._TERMINAL_STATE_SYNC_ID)
    agent._exit_barrier()


@pytest.mark.timeout(60)
def test_the_store_sharing_variable_still_switches_sharing_off(
    handler: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(compat.SHARE_STORE_ENV, raising=False)
    assert handler().use_agent_store is True
    monkeypatch.setenv(compat.SHARE_STORE_ENV, "1")
    assert handler().use_agent_store is False, (
        f"{VERSION} ignores {compat.SHARE_STORE_ENV}=1: restarted workers would reuse the "
        f"agent's store and dial stale addresses; {FIX}"
    )


def test_torch_tells_workers_where_to_write_their_error_file(tmp_path: Path) -> None:
    envs: dict[int, dict[str, str]] = {0: {"TORCHELASTIC_RESTART_COUNT": "0", "RANK": "0"}}
    DefaultLogsSpecs(log_dir=str(tmp_path)).reify(envs)
    assert compat.ERROR_FILE_ENV in envs[0], f"{VERSION} no longer sets {compat.ERROR_FILE_ENV}"


def test_torch_reads_the_error_file_the_worker_bootstrap_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("_accel_bootstrap_probe", BOOTSTRAP)
    assert spec is not None and spec.loader is not None
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    error_file = tmp_path / "error-0.json"
    monkeypatch.setenv(compat.ERROR_FILE_ENV, str(error_file))
    bootstrap._record_error(ValueError("bad batch"), "Traceback ...\nValueError: bad batch\n")

    failure = ProcessFailure(local_rank=0, pid=123, exitcode=1, error_file=str(error_file))
    assert failure.error_file_data["accel"]["type"] == "ValueError"
    assert failure.message["message"] == "ValueError: bad batch"
    assert failure.timestamp == int(json.loads(error_file.read_text())["accel"]["time"])


@pytest.mark.parametrize(
    ("text", "raised"),
    [
        ('{"message": {"message": "Runt', ValueError),  # a worker stopped while it wrote
        ('{"message": ' + "[" * 100_000, RecursionError),  # deeper than json can read
    ],
    ids=["torn", "deep"],
)
def test_a_torn_error_file_is_set_aside_where_torch_keeps_the_workers_files(
    tmp_path: Path, text: str, raised: type[Exception]
) -> None:
    from torch.distributed.elastic.multiprocessing.api import SubprocessContext

    envs: dict[int, dict[str, str]] = {0: {"TORCHELASTIC_RESTART_COUNT": "0", "RANK": "0"}}
    logs = DefaultLogsSpecs(log_dir=str(tmp_path))
    context = SubprocessContext("probe", sys.executable, {0: ("-c", "pass")}, envs, logs)
    path = Path(context.error_files[0])  # the attribute the launcher's guard reads
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(raised):  # torch still raises on it: the guard is still needed
        ProcessFailure(local_rank=0, pid=123, exitcode=1, error_file=str(path))
    assert compat.set_aside_torn_error_files(context) is True
    failure = ProcessFailure(local_rank=0, pid=123, exitcode=1, error_file=str(path))
    assert failure.exitcode == 1 and not path.exists()
    assert Path(f"{path}{compat.TORN}").read_text() == text
    assert compat.set_aside_torn_error_files(context) is False  # nothing left to set aside


def _outer(fn: Any) -> str:
    return _inner(fn)


def _inner(fn: Any) -> str:
    return str(fn())


def test_the_fast_method_name_names_the_same_frame_as_torchs() -> None:
    original = compat.TORCH_GET_METHOD_NAME
    assert original is not compat._method_name
    assert _outer(original) == _outer(compat._method_name) == "_outer"


def test_importing_the_agent_replaces_the_slow_method_name() -> None:
    import accel.launch.agent  # noqa: F401 - the import installs it

    assert dynamic_rendezvous.get_method_name is compat._method_name


def test_agent_environment_switches_store_sharing_off_only_with_restarts() -> None:
    signals = (signal.SIGINT, signal.SIGTERM)
    assert compat.agent_environment(signals, False, {}) == {compat.SIGNALS_ENV: "SIGINT,SIGTERM"}
    with_restarts = compat.agent_environment(signals, True, {})
    assert with_restarts[compat.SHARE_STORE_ENV] == "1"
    mine = compat.agent_environment(signals, True, {compat.SHARE_STORE_ENV: "0"})
    assert compat.SHARE_STORE_ENV not in mine  # the user's own choice stands


def test_the_agents_one_sleep_is_the_wait_between_two_checks_of_its_workers() -> None:
    """wake_on_exit swaps the agent module's ``time`` for one whose ``sleep`` wakes when a
    worker ends: that sleep must be ``_invoke_run``'s, and the module's only one."""
    from torch.distributed.elastic.agent.server import api

    assert compat.TORCH_AGENT_TIME is time, f"{VERSION}: the agent module's `time` changed; {FIX}"
    assert inspect.getsource(api).count("time.sleep(") == 1, f"{VERSION}: {FIX}"
    assert "time.sleep(monitor_interval)" in inspect.getsource(
        api.SimpleElasticAgent._invoke_run
    ), f"{VERSION}: _invoke_run no longer sleeps monitor_interval; {FIX}"


def test_waking_on_exit_keeps_the_rest_of_the_agents_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.elastic.agent.server import api

    monkeypatch.setattr(api, "time", api.time)
    compat.wake_on_exit(None)
    assert api.time is not time
    assert api.time.monotonic is time.monotonic and api.time.time is time.time
    api.time.sleep(0)  # nothing to watch: torch's sleep


def test_the_rendezvous_errors_accel_explains_by_name_are_torchs() -> None:
    # accel matches them by name (launch/_ends.launch_error): a rename would bring back
    # torch's bare text ("RendezvousClosedError: " has none at all).
    from torch.distributed.elastic import rendezvous

    from accel.launch._ends import launch_error

    log = Path("/runs/r/launcher.log")
    closed = launch_error(rendezvous.RendezvousClosedError(), log, "10.0.0.5:29400")
    assert str(closed).startswith("the job's rendezvous is closed: the run ended on another node")
    assert str(closed).endswith(f"start the job again on every node (torch's messages: {log})")
    lost = launch_error(
        rendezvous.RendezvousConnectionError("The connection to the C10d store has failed."),
        log,
        "10.0.0.5:29400",
    )
    assert str(lost).startswith(
        "lost the rendezvous at 10.0.0.5:29400: the node that hosts it (node 0) stopped or "
        "cannot be reached (The connection to the C10d store has failed.)"
    )
    timeout = launch_error(rendezvous.RendezvousTimeoutError("x"), log)
    assert str(timeout).startswith("the other nodes did not join the rendezvous in time (x)")
    # torch 2.13's says nothing: no "()" for it
    quiet = launch_error(rendezvous.RendezvousTimeoutError(), log)
    assert str(quiet) == f"the other nodes did not join the rendezvous in time; see {log}"
    assert all(getattr(e, "exit_code", None) == 1 for e in (closed, lost, timeout))
