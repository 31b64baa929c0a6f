"""accel._locks: the one lock primitive and the one liveness probe, with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from accel import _locks
from accel.errors import LockTimeout
from accel.runs import is_live, run_lock_path
from accel.store.lease import holder_of
from accel.workspace import Workspace

# Takes the flock ("ex": as a holder does, "sh": as a probe does), says so, then waits.
HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX if sys.argv[2] == "ex" else fcntl.LOCK_SH)
    print("held", flush=True)
    time.sleep(60)
    """
)


def hold(path: Path, kind: str) -> subprocess.Popen[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), kind], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_locked_waits_at_most_its_timeout_and_names_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "state.lock"
    holder = hold(path, "ex")
    try:
        start = time.monotonic()
        with pytest.raises(LockTimeout, match="state.lock"), _locks.locked(path, 0.3):
            pass
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        stop(holder)
    with _locks.locked(path, 5):  # the holder's death released it
        assert _locks.held(path)  # a probe opens the file anew: it sees this process too
    assert path.exists()  # lock files are never deleted


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_held_follows_the_life_of_the_holder_even_through_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "run-x.lock"
    assert not _locks.held(path) and not path.exists()  # probing never creates
    holder = hold(path, "ex")
    try:
        assert _locks.held(path)
    finally:
        stop(holder)
    assert not _locks.held(path)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_a_probe_at_the_same_moment_is_not_taken_for_a_holder(project: Path) -> None:
    # Two readers probing at once (accel status and accel clean) must not see each other
    # as the live launcher of a run, or the holder of a series.
    ws = Workspace.discover().ensure()
    probes = [
        hold(run_lock_path(ws.layout, "20260101-000000-aaaaaa"), "sh"),
        hold(ws.layout.lock("series-default"), "sh"),
    ]
    try:
        assert not is_live(ws.layout, "20260101-000000-aaaaaa")
        assert holder_of(ws.layout, "default") is None
    finally:
        for probe in probes:
            stop(probe)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_try_hold_never_waits_and_a_missing_file_is_free(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "series-a.lock"
    with _locks.try_hold(path, create=False) as free:
        assert free and not path.exists()
    holder = hold(path, "ex")
    try:
        start = time.monotonic()
        with _locks.try_hold(path, create=True) as free:
            assert not free
        assert time.monotonic() - start < 1
    finally:
        stop(holder)
    with _locks.try_hold(path, create=True) as free:
        assert free and _locks.held(path)
    assert not _locks.held(path)


def test_a_lock_is_refused_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "locks" / "x.lock"
    link.parent.mkdir()
    os.symlink(target, link)
    with pytest.raises(OSError), _locks.locked(link, 0.1):
        pass
    assert not _locks.held(link)


def test_one_scan_of_locks_finds_live_runs_and_series_in_use(tmp_path: Path) -> None:
    """``accel clean``, ``accel env`` and ``sync`` ask the same question of ``locks/``."""
    import fcntl

    from accel._locks import held_names

    held_fds = []
    for name in ("run-a.lock", "run-b.lock", "series-x.lock", "run-.lock", "run-c.lock.tmp"):
        fd = os.open(tmp_path / name, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held_fds.append(fd)
    (tmp_path / "run-free.lock").touch()  # nobody holds it
    os.symlink(tmp_path / "run-a.lock", tmp_path / "run-link.lock")  # never followed
    try:
        assert held_names(tmp_path, "run-", ".lock") == {"a", "b"}
        assert held_names(tmp_path, "series-", ".lock") == {"x"}
        assert held_names(tmp_path / "missing", "run-", ".lock") == frozenset()
    finally:
        for fd in held_fds:
            os.close(fd)
    assert held_names(tmp_path, "run-", ".lock") == frozenset()
