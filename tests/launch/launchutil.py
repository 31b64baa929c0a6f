"""Helpers for launcher tests: watch processes (and run_helpers' run and wait)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel.cli.main import main
from accel.launch.guard import descendants, process_table, run_processes
from run_helpers import run_folder, run_json, wait_for

__all__ = [
    "SCRIPTS",
    "assert_gone",
    "assert_no_orphans",
    "dry_run_json",
    "pid_alive",
    "run_folder",
    "run_json",
    "tree",
    "wait_for",
    "wait_for_guard_rounds",
]

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def dry_run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """``accel launch --dry-run --json ARGS`` in this process: the plan it prints."""
    code = main(["launch", "--dry-run", "--json", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def refused(capsys: pytest.CaptureFixture[str], *args: str, script: str = "") -> str:
    """``accel launch ARGS SCRIPT`` in this process, refused: exit 2, one line, no
    traceback; the line. ``SCRIPT``: scripts/env_dump.py unless given."""
    code = main(["launch", *args, script or str(SCRIPTS / "env_dump.py")])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def assert_no_orphans(run_id: str, timeout: float = 5.0) -> None:
    """Every process that carries the run's ACCEL_RUN_ID is gone within ``timeout``."""
    wait_for(lambda: not run_processes(run_id), timeout, f"the processes of run {run_id} to die")


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that never comes in a container is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def tree(launcher: int) -> dict[int, int]:
    """``pid -> start time`` of every descendant of ``launcher`` now (the guard included)."""
    return descendants(launcher, process_table())


def assert_gone(processes: dict[int, int], timeout: float) -> None:
    """None of ``processes`` (pid -> start time) is alive within ``timeout`` (a pid given
    out again to another process does not count)."""

    def gone() -> bool:
        table = process_table()
        return not any(
            p in table and table[p][1] == s and pid_alive(p) for p, s in processes.items()
        )

    wait_for(gone, timeout, f"the processes {sorted(processes)} to be gone")


def wait_for_guard_rounds(launcher: int, rounds: int = 3, timeout: float = 30.0) -> None:
    """Wait until the launcher's guard has slept ``rounds`` more times: each sleep ends a
    snapshot of the tree, so what exists now is in the guard's record. The guard is the
    launcher's child with the launcher's own command line (a fork)."""
    own = _cmdline(launcher)
    children = [p for p, (ppid, _) in process_table().items() if ppid == launcher]
    (guard,) = [p for p in children if _cmdline(p) == own]
    start = _sleeps(guard)
    wait_for(lambda: _sleeps(guard) >= start + rounds, timeout, "the guard to see the tree")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _sleeps(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches for {pid}")
