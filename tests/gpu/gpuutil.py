"""Helpers for the GPU test set: the skip marker, a scratch project, the installed accel.

Every module of tests/gpu sets ``pytestmark = GPU``: the tests carry the ``gpu`` marker
(``pytest -m gpu`` selects them, ``scripts/gpu-check.sh`` runs them) and skip cleanly,
with one reason, where torch sees no CUDA device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train.py"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
NO_CUDA = "needs a CUDA GPU (torch sees none here); scripts/gpu-check.sh runs this set"


def cuda_count() -> int:
    """CUDA devices torch sees (0 without a GPU or with a CPU build of torch)."""
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver is no GPU
        return 0


GPU = [pytest.mark.gpu, pytest.mark.skipif(cuda_count() == 0, reason=NO_CUDA)]


def accel_run(
    project: Path, *args: str, timeout: float = 150, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed ``accel`` in ``project`` (the path users take)."""
    exe = Path(sys.executable).parent / "accel"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "accel"]
    return subprocess.run(
        [*cmd, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def launch_auto(
    project: Path, name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``accel launch -n auto --run-name NAME ARGS...`` (one worker per GPU), which must pass."""
    done = accel_run(project, "launch", "-n", "auto", "--run-name", name, *args, env=env)
    assert done.returncode == 0, failure(done)
    return done


def runs(project: Path) -> dict[str, dict[str, Any]]:
    """run.json of every run in ``project``, by run name."""
    folder = project / ".accelerate" / "logs" / "runs"
    records = [json.loads((d / "run.json").read_text()) for d in folder.iterdir()]
    return {str(r["name"]): r for r in records}


def failure(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
