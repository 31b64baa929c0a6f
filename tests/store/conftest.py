"""Fixtures for the store tests: a workspace in the isolated project folder."""

from __future__ import annotations

import multiprocessing

import pytest


@pytest.fixture
def fork() -> multiprocessing.context.BaseContext:
    """Forked children start in milliseconds; start them with workers.process()."""
    return multiprocessing.get_context("fork")
