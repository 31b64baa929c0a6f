"""Launcher tests run twice in CI: as they are, and with ``--launch-preload``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def preload_mode(
    isolated: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> bool:
    """``--launch-preload``: the whole launch suite again, workers forked from a template."""
    on = bool(request.config.getoption("--launch-preload"))
    if on:
        monkeypatch.setenv("ACCEL_LAUNCH_PRELOAD", "true")
    return on
