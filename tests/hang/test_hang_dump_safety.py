"""accel.hang.dump against a hostile run folder: what it appends to and whom it signals.

A rank log replaced by a link or a FIFO is skipped, never followed or waited on; a pid
that ``workers.json`` names is signalled only when it is a worker of this very run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel import _worker_hooks, hang
from accel.hang.dump import append_to_rank_logs, belongs_to
from run_helpers import WATCHDOG, unblocked_after, wait_for


def test_a_rank_log_that_links_outside_is_not_written_through(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    (run_dir / "rank-0.log").symlink_to(outside)
    dangling = tmp_path / "not-yet"
    (run_dir / "rank-2.log").symlink_to(dangling)
    append_to_rank_logs(run_dir, {0: "stack 0", 1: "stack 1", 2: "stack 2"}, "accel stack")
    assert outside.read_text() == "precious\n"
    assert not dangling.exists()  # a dangling link is not created through either
    assert (run_dir / "rank-0.log").is_symlink() and (run_dir / "rank-2.log").is_symlink()
    assert "stack 1" in (run_dir / "rank-1.log").read_text()  # the others still get theirs


@pytest.mark.timeout(30)
def test_a_rank_log_that_is_a_fifo_is_skipped_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "rank-0.log"
    os.mkfifo(fifo)
    start = time.monotonic()
    with unblocked_after(fifo) as fired:
        append_to_rank_logs(tmp_path, {0: "stack 0", 1: "stack 1"}, "accel stack")
    assert not fired, "append_to_rank_logs blocked on a FIFO"
    assert time.monotonic() - start < WATCHDOG
    assert "stack 1" in (tmp_path / "rank-1.log").read_text()


@pytest.mark.timeout(30)
def test_a_fifo_with_a_reader_gets_no_dump_either(tmp_path: Path) -> None:
    fifo = tmp_path / "rank-0.log"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer's open succeeds now
    try:
        with unblocked_after(fifo) as fired:
            append_to_rank_logs(tmp_path, {0: "stack 0"}, "accel stack")
        assert not fired
        assert os.read(reader, 4096) == b""  # nothing was written into it
    finally:
        os.close(reader)


def test_a_regular_rank_log_still_gets_its_dump_on_a_line_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "rank-0.log").write_bytes(b"before\n45%|####")
    append_to_rank_logs(tmp_path, {0: "stack 0"}, "hang")
    lines = (tmp_path / "rank-0.log").read_text().splitlines()
    assert lines[:2] == ["before", "45%|####"] and lines[3] == "stack 0"
    assert lines[2].startswith("===== accel: hang at ")


# -- whom `accel stack` signals -------------------------------------------------------------

# A process that handles SIGUSR1 (as a worker does) and records that it got one.
DECOY = textwrap.dedent(
    """
    import signal, sys, time
    marker = sys.argv[1]
    def got(*_):
        open(marker, "w").write("signalled")
    signal.signal(signal.SIGUSR1, got)
    print("ready", flush=True)
    time.sleep(60)
    """
)

# A real worker of the run: its handler installed as the launcher's bootstrap does it.
WORKER = textwrap.dedent(
    f"""
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("_accel_hang", {str(Path(_worker_hooks.__file__))!r})
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.install_stack_dump_handler()
    def waiting_in_the_worker():
        print("ready", flush=True)
        time.sleep(60)
    waiting_in_the_worker()
    """
)


@contextlib.contextmanager
def started(code: str, *args: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_stack_signals_only_pids_that_are_workers_of_this_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "run-a"
    other = tmp_path / "runs" / "run-b"
    run_dir.mkdir(parents=True)
    other.mkdir()
    unrelated, foreign = tmp_path / "unrelated.txt", tmp_path / "foreign.txt"
    with (
        started(DECOY, str(unrelated), env={}) as stranger,
        started(DECOY, str(foreign), env={"ACCEL_RUN_DIR": str(other), "RANK": "1"}) as neighbour,
        started(WORKER, env={"ACCEL_RUN_DIR": str(run_dir), "RANK": "2"}) as worker,
    ):
        # workers.json edited by hand: ranks 0 and 1 name processes that are not this run's
        hang.write_workers(run_dir, 0, {0: stranger.pid, 1: neighbour.pid, 2: worker.pid})
        stacks = hang.dump_stacks(run_dir, hang.read_workers(run_dir), wait=5.0)
        time.sleep(0.5)  # a signal sent would have been handled by now
        assert not unrelated.exists() and not foreign.exists(), "an unrelated pid was signalled"
        assert "not a worker of this run" in stacks[0] and "not a worker of this run" in stacks[1]
        assert "waiting_in_the_worker" in stacks[2]  # the run's own worker still dumps
        assert stranger.poll() is None and neighbour.poll() is None and worker.poll() is None


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_worker_forked_from_the_preload_template_is_one_of_its_launchers(
    tmp_path: Path,
) -> None:
    # /proc shows a forked worker the template's environment, without ACCEL_RUN_DIR:
    # `accel stack` of a --preload run had signalled none of its workers
    from accel.launch.preload import TEMPLATE

    argv = [sys.executable, "-c", "import time; time.sleep(30)", str(TEMPLATE), "3", "4242"]
    proc = subprocess.Popen(argv, env={k: v for k, v in os.environ.items() if k != "ACCEL_RUN_DIR"})
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        wait_for(lambda: os.fsencode(TEMPLATE) in cmdline.read_bytes(), 20, "python's exec")
        assert belongs_to(proc.pid, tmp_path, launcher_pid=4242)
        assert not belongs_to(proc.pid, tmp_path, launcher_pid=4343)
        assert not belongs_to(proc.pid, tmp_path)
    finally:
        proc.kill()
        proc.wait()
