"""logs/training.log replaced by a FIFO (or another non-file): a log line is refused at
once, never waited on, and the command that logs goes on (it used to hang forever)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from accel.workspace import Workspace
from run_helpers import WATCHDOG, unblocked_after


def make_ws(project: Path, max_bytes: int = 1000, backups: int = 2) -> Workspace:
    ws = Workspace(project / ".accelerate").ensure()
    ws.config_file.write_text(
        f"logs:\n  rotate_max_bytes: {max_bytes}\n  backup_count: {backups}\n"
    )
    return Workspace(ws.path)


@pytest.mark.timeout(30)
def test_a_fifo_in_place_of_the_log_is_refused_without_waiting(project: Path) -> None:
    ws = make_ws(project)
    ws.logs_dir.mkdir(parents=True, exist_ok=True)
    fifo = ws.logs_dir / "training.log"
    os.mkfifo(fifo)
    start = time.monotonic()
    with unblocked_after(fifo) as fired:
        written = ws.log("clean removed 3 items", command="accel clean")
    assert not fired, "logging blocked on a FIFO"
    assert written is False and time.monotonic() - start < WATCHDOG
    assert fifo.is_fifo()  # left as it is


@pytest.mark.timeout(30)
def test_a_fifo_with_a_reader_gets_no_line_either(project: Path) -> None:
    ws = make_ws(project)
    ws.logs_dir.mkdir(parents=True, exist_ok=True)
    fifo = ws.logs_dir / "training.log"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert ws.log("an event", command="t") is False
        assert os.read(reader, 4096) == b""  # nothing was written into it
    finally:
        os.close(reader)


@pytest.mark.timeout(30)
def test_rotation_past_a_fifo_does_not_wait_on_it(project: Path) -> None:
    ws = make_ws(project, max_bytes=200, backups=2)
    assert ws.log("first " + "x" * 150, command="t")
    fifo = ws.logs_dir / "training.log.1"
    os.mkfifo(fifo)
    with unblocked_after(fifo) as fired:
        assert ws.log("second " + "x" * 150, command="t")  # rotates: .1 -> .2, log -> .1
    assert not fired
    assert (ws.logs_dir / "training.log.2").is_fifo()
    assert "second" in (ws.logs_dir / "training.log").read_text()


def test_a_folder_in_place_of_the_log_is_refused(project: Path) -> None:
    ws = make_ws(project)
    (ws.logs_dir / "training.log").mkdir(parents=True)
    assert ws.log("an event", command="t") is False


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_deleting_commands_finish_with_a_fifo_in_place_of_the_log(project: Path) -> None:
    import run_helpers

    ws = make_ws(project)
    ws.cache.put("one", b"1" * 100)
    ws.cache.put("two", b"2" * 100)
    fifo = ws.logs_dir / "training.log"
    ws.logs_dir.mkdir(parents=True, exist_ok=True)
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    for args in (("cache", "rm", "one", "--yes"), ("clean", "--older-than", "0s", "--yes")):
        # run_helpers.accel raises Hung (a timeout) where the command used to block forever
        done = run_helpers.accel(project, *args, timeout=30)
        assert done.returncode == 0, done.stderr
    assert "one" not in ws.cache and "two" not in ws.cache
    assert fifo.is_fifo()
