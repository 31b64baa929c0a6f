"""How fast a restartable job's ranks find each other (issue 28: kill -> training).

Under ``accel launch`` with restarts, rank 0 of each attempt hosts a fresh TCPStore and
every rank starts at once; torch's client, refused by a store not yet listening, sleeps
0.4 to 0.7 s before it dials again. ``await_rank0_store`` polls instead. And torch's
rendezvous sleeps a random 0 to 0.3 s before each join of a one-node job, which has no
other node's join to spread. Real sockets here; the time it saves is bench_recovery's.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from accel.accelerator._setup import await_rank0_store
from accel.launch import _torch_compat as compat


@pytest.fixture
def not_listening() -> Iterator[socket.socket]:
    """A socket bound to a port of its own that does not listen yet: a dial is refused."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    yield server
    server.close()


def _env(server: socket.socket, **extra: str) -> dict[str, str]:
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.getsockname()[1]), **extra}


def _await_in_thread(rank: int, env: dict[str, str]) -> threading.Thread:
    waiter = threading.Thread(target=await_rank0_store, args=(rank, env), daemon=True)
    waiter.start()
    return waiter


@pytest.mark.timeout(60)
@pytest.mark.parametrize("agent_store", [None, "False"], ids=["unset", "False"])
def test_a_rank_waits_for_rank_0s_store_and_goes_on_once_it_listens(
    not_listening: socket.socket, agent_store: str | None
) -> None:
    # torch sets TORCHELASTIC_USE_AGENT_STORE=False where rank 0 hosts the store
    extra = {} if agent_store is None else {"TORCHELASTIC_USE_AGENT_STORE": agent_store}
    waiter = _await_in_thread(1, _env(not_listening, **extra))
    waiter.join(0.3)
    assert waiter.is_alive()  # refused all along: still waiting (its limit is 30 s)
    not_listening.listen()
    not_listening.settimeout(30)
    dialled, _ = not_listening.accept()  # its dial, the first after the listen
    dialled.close()
    waiter.join(30)
    assert not waiter.is_alive()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("rank", "extra"),
    [(0, {}), (1, {"TORCHELASTIC_USE_AGENT_STORE": "True"})],
    ids=["rank 0 hosts it", "the agent's store listens already"],
)
def test_rank_0_and_the_agents_shared_store_leave_it_to_torch(
    not_listening: socket.socket, rank: int, extra: dict[str, str]
) -> None:
    waiter = _await_in_thread(rank, _env(not_listening, **extra))
    waiter.join(30)  # a refused port: had it polled, it would wait its 30 s limit
    assert not waiter.is_alive()


@pytest.mark.timeout(60)
def test_a_rank_that_is_refused_past_its_limit_leaves_the_wait_to_torch(
    not_listening: socket.socket,
) -> None:
    await_rank0_store(1, _env(not_listening), limit=0.05)  # returns: torch waits on


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "env",
    [{}, {"MASTER_ADDR": "127.0.0.1"}, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "x"}],
    ids=["no address", "no port", "a port that is no number"],
)
def test_a_rank_without_a_store_address_does_not_wait(env: dict[str, str]) -> None:
    await_rank0_store(1, env)  # torch's init says what is missing, its way


@pytest.fixture
def torch_delay(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """torch's ``_delay`` recorded instead of slept; accel's state restored after."""
    asked: list[object] = []
    monkeypatch.setattr(compat, "TORCH_DELAY", lambda seconds: asked.append(seconds))
    monkeypatch.setattr(compat, "_one_node", compat._one_node)
    monkeypatch.setattr(dynamic_rendezvous, "_delay", dynamic_rendezvous._delay)
    return asked


def test_a_one_node_job_joins_its_rendezvous_without_the_random_skew(
    torch_delay: list[object],
) -> None:
    compat.skip_join_skew(True)
    assert dynamic_rendezvous._delay is compat._delay
    dynamic_rendezvous._delay(seconds=(0, 0.3))  # the skew before a join: skipped
    dynamic_rendezvous._delay(seconds=1)  # torch's poll of a rendezvous' state: kept
    dynamic_rendezvous._delay(seconds=(0, 2.5))  # 2.15's backoff after a failed write: kept
    assert torch_delay == [1, (0, 2.5)]


def test_a_job_of_several_nodes_keeps_torchs_skew(torch_delay: list[object]) -> None:
    compat.skip_join_skew(False)
    dynamic_rendezvous._delay(seconds=(0, 0.3))
    dynamic_rendezvous._delay(seconds=1)
    assert torch_delay == [(0, 0.3), 1]


def test_torchs_delay_is_the_one_accel_keeps() -> None:
    """The one replaced is torch's own (the contract test checks its signature)."""
    assert compat.TORCH_DELAY is not compat._delay
    assert compat.TORCH_DELAY.__module__ == "torch.distributed.elastic.rendezvous.utils"
