"""The tests' own helpers where a mistake would make other tests flaky."""

from __future__ import annotations

import gc
import multiprocessing
import os
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

import run_helpers
from run_helpers import DEFAULT_PORTS, MIN_PORTS, PORTS, free_port, port_band, ports_outside

SCRIPTS = Path(__file__).parent / "scripts"


def test_a_free_port_is_never_one_an_outgoing_connection_can_take() -> None:
    """An endpoint's port comes from outside the ephemeral range, where another test's
    connection (its source port) cannot take it between free_port() and the bind."""
    ephemeral = run_helpers._ephemeral()
    if not PORTS:
        pytest.skip("this machine has no room outside its ephemeral range")
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50  # never the same twice in one process
    for port in ports:
        assert port not in ephemeral and port != 29500
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free


def test_each_xdist_worker_draws_from_a_band_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(run_helpers.SHARE_ENV, raising=False)  # .ci/run's side-by-side runs
    bands = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        bands.append(set(port_band()))
    assert all(bands) and not (bands[0] & bands[1] or bands[1] & bands[2] or bands[0] & bands[2])
    assert set().union(*bands) <= set(PORTS)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert port_band() == PORTS


def test_pytest_runs_side_by_side_draw_from_bands_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # .ci/run's three torch releases, each with two xdist workers: six disjoint bands.
    bands = []
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    for share in ("0/3", "1/3", "2/3"):
        monkeypatch.setenv(run_helpers.SHARE_ENV, share)
        for worker in ("gw0", "gw1"):
            monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
            bands.append(set(port_band()))
    assert all(bands) and sum(map(len, bands)) == len(set().union(*bands))
    assert set().union(*bands) <= set(PORTS)


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(run_helpers, "port_band", lambda: range(taken, taken + 1))
        with pytest.raises(RuntimeError, match=f"no free port in {taken}-{taken}"):
            free_port()


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (32768, 60999, DEFAULT_PORTS),  # Linux's default
        (30000, 65535, DEFAULT_PORTS),
        (15000, 65535, range(10000, 15000)),  # below, where above has no room
        (20000, 60999, range(10000, 20000)),  # the wider stretch of the two
        (1024, 60999, range(61000, 65536)),
        (10500, 65535, range(0)),  # no stretch of MIN_PORTS: free_port asks the kernel
        (1024, 65535, range(0)),
    ],
)
def test_the_tests_ports_lie_outside_the_machines_ephemeral_range(
    low: int, high: int, expected: range
) -> None:
    ports = ports_outside(range(low, high + 1))
    assert ports == expected
    assert not ports or (len(ports) >= MIN_PORTS and (ports.stop <= low or ports.start > high))


def test_without_room_outside_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_helpers, "port_band", lambda: range(0))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))  # free


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_ranks_whose_port_was_taken_start_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop 41's CI: rank 0 met EADDRINUSE on the port free_port() had handed out (taken
    by a process outside the tests' bands before the bind), and rank 1 waited on it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        ports = [held.getsockname()[1]]
        drawn = free_port
        monkeypatch.setattr(run_helpers, "free_port", lambda: ports.pop() if ports else drawn())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "MASTER_"))}
        codes = run_helpers.two_ranks(SCRIPTS / "bare_group.py", [str(tmp_path)], env, tmp_path)
    assert codes == [0, 0], (tmp_path / "err-0.txt").read_text()
    assert not ports  # the taken port was handed out first
    assert [(tmp_path / f"rank-{r}.txt").read_text() for r in (0, 1)] == ["2", "2"]


def _start_a_thread_and_collect() -> None:
    """What a forked child does: a thread of its own (a multiprocessing queue's feeder, a
    checkpoint writer), then a collection."""
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    gc.collect()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_child_forked_after_a_test_left_a_store_in_a_cycle_does_not_abort() -> None:
    """CI on a0e63af: a crash-point child aborted (SIGABRT, ``std::system_error``)
    collecting a TCPStore an earlier test of the same worker had left in a cycle."""
    import torch.distributed as dist

    before = run_helpers.torch_threads()
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    cycle["store"] = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    assert set(run_helpers.torch_threads()) - set(before)  # its server thread
    was_enabled = gc.isenabled()
    gc.disable()  # only the fork's collection may reach it
    try:
        del cycle
        child = multiprocessing.get_context("fork").Process(target=_start_a_thread_and_collect)
        child.start()
        child.join(50)
        assert child.exitcode == 0
        assert set(run_helpers.torch_threads()) <= set(before)  # ended here, in the parent
    finally:
        if was_enabled:
            gc.enable()
