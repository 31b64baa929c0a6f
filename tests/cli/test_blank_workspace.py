"""An empty ``--workspace`` or ``ACCEL_WORKSPACE`` is refused, never read as unset.

A cron line ``accel --workspace "$WS" clean --older-than 0s --yes`` with ``$WS`` unset
would otherwise clean whatever workspace the current folder finds.
"""

from __future__ import annotations

import pytest
from accel_runner import cli

from accel.workspace import Workspace

CLEAN = ("clean", "--older-than", "0s", "--keep-last", "0", "--yes")


@pytest.fixture
def entry(ws: Workspace) -> Workspace:
    ws.cache.put("datasets/index", b"payload")
    return ws


def test_the_setup_cleans_the_current_workspace(entry: Workspace) -> None:
    assert cli(*CLEAN).exit_code == 0  # what a blank value would have done
    assert entry.cache.get("datasets/index") is None


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_workspace_option_is_refused(entry: Workspace, blank: str) -> None:
    result = cli("--workspace", blank, *CLEAN)
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: --workspace is empty: give a path, or leave the option out\n"
    assert result.stdout == ""
    assert entry.cache.get("datasets/index") == b"payload"


@pytest.mark.parametrize("blank", ["", " \t"])
def test_an_empty_workspace_variable_is_refused(
    entry: Workspace, monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    monkeypatch.setenv("ACCEL_WORKSPACE", blank)
    result = cli(*CLEAN)
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: ACCEL_WORKSPACE is set but empty: unset it or give a path\n"
    assert result.stdout == ""
    monkeypatch.delenv("ACCEL_WORKSPACE")
    assert entry.cache.get("datasets/index") == b"payload"
