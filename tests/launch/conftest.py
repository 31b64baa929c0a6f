"""Fixtures for launcher tests: the installed `accel`, run or started in the background."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def accel(accel_exe: list[str], project: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*accel_exe, *args], cwd=project, capture_output=True, text=True, timeout=timeout
        )

    return run


@pytest.fixture
def start_accel(
    accel_exe: list[str], project: Path
) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [*accel_exe, *args],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
