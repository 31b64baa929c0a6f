"""Helpers for launcher tests: watch processes (and run_helpers' run and wait)."""

from __future__ import annotations

from pathlib import Path

from accel.launch.guard import run_processes
from run_helpers import run_folder, run_json, wait_for

__all__ = ["SCRIPTS", "assert_no_orphans", "pid_alive", "run_folder", "run_json", "wait_for"]

SCRIPTS = Path(__file__).resolve().parent / "scripts"


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
