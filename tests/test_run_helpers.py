"""The tests' own helpers where a mistake would make other tests flaky."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import run_helpers
from run_helpers import PORTS, free_port, port_band


def _ephemeral() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


def test_a_free_port_is_never_one_an_outgoing_connection_can_take() -> None:
    """An endpoint's port comes from outside the ephemeral range, where another test's
    connection (its source port) cannot take it between free_port() and the bind."""
    ephemeral = _ephemeral()
    if PORTS.stop > ephemeral.start:
        pytest.skip("this machine's ephemeral range overlaps the tests' ports")
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
        monkeypatch.setattr(run_helpers, "_ephemeral_low", lambda: 1 << 16)
        with pytest.raises(RuntimeError, match=f"no free port in {taken}-{taken}"):
            free_port()
