"""Helpers for launcher tests: find the run, wait, watch processes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel.launch.guard import run_processes

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def run_json(project: Path) -> dict[str, Any]:
    (folder,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    data: dict[str, Any] = json.loads((folder / "run.json").read_text())
    return data


def run_folder(project: Path) -> Path:
    (folder,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    return folder


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


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
