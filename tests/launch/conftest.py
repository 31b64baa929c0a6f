"""Launcher tests run twice in CI: as they are, and with ``--launch-preload``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def preload_mode(
    isolated: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> bool:
    """``--launch-preload``: the launch tests that start processes again, workers forked
    from a template. The fast lane stays as it is: none of it reaches a worker, and with
    preload on, a launch refused after planning (too few GPUs) would still have started
    its template early (``prepare._start_template``), a process the fast lane forbids."""
    on = bool(request.config.getoption("--launch-preload")) and (
        request.node.get_closest_marker("slow") is not None
    )
    if on:
        monkeypatch.setenv("ACCEL_LAUNCH_PRELOAD", "true")
    return on
