"""Every test runs in a fresh folder with a fake HOME, so none can touch the real one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    for name in list(os.environ):
        if name.startswith(("ACCEL_", "ACCELERATE_", "TORCHELASTIC_", "SLURM_")) or name in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


@pytest.fixture
def project(isolated: Path) -> Path:
    """The current folder of the test: an empty project without a workspace yet."""
    return isolated


@pytest.fixture
def accel_exe() -> list[str]:
    """The installed ``accel`` executable (the path users take)."""
    exe = Path(sys.executable).parent / "accel"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "accel"]
