"""Running ``accel env`` for the tests of tests/env: installed, or in this process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from accel.workspace import Workspace


def run_env(
    exe: list[str],
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*exe, "env", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env if env is not None else dict(os.environ),
    )


def env_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The Typer app in this process (torch is imported once for the whole module)."""
    from accel.cli.main import main

    code = main(["env", *args])
    out, err = capsys.readouterr()
    return code, out, err


def make_ws(project: Path) -> Workspace:
    return Workspace(project / ".accelerate").ensure()
