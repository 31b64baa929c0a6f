"""Fixtures for the store tests: a workspace in the isolated project folder."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from accel import Workspace


@pytest.fixture
def ws(project: Path) -> Workspace:
    return Workspace.discover().ensure()


@pytest.fixture
def fork() -> multiprocessing.context.BaseContext:
    """Forked children start in milliseconds; start them with workers.process()."""
    return multiprocessing.get_context("fork")
