"""Helpers for tests that run the installed `accel` in a project and read its run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def accel(
    project: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 110
) -> subprocess.CompletedProcess[str]:
    """The installed `accel` with ``args``, in ``project``, output captured."""
    exe = str(Path(sys.executable).parent / "accel")
    return subprocess.run(
        [exe, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def only_run(project: Path) -> dict[str, Any]:
    """The run.json of the project's only run."""
    (folder,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    data: dict[str, Any] = json.loads((folder / "run.json").read_text())
    return data
