"""`accel checkpoints verify` and `list`: a checkpoint without state.tensors fails
verify in one line naming its step, and `--series` naming no series is exit 2 naming
the series there are (as `show` and `export` refuse it), never a pass on nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from accel_runner import cli

from accel.store.checkpoints import Checkpoints
from accel.workspace import Workspace


def _save(ws: Workspace, series: str, *steps: int) -> None:
    ckpts = Checkpoints(ws.layout, ws.settings.checkpoints, series=series)
    for step in steps:
        ckpts.save({"w": torch.full((2,), float(step))}, step)


def test_verify_fails_a_manifest_with_no_files_naming_the_step(ws: Workspace) -> None:
    _save(ws, "default", 10, 20, 30)
    step = ws.checkpoints_dir / "default" / "step-000000000030"
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["files"] = {}
    (step / "manifest.json").write_text(json.dumps(manifest))
    result = cli("checkpoints", "verify")
    assert result.exit_code == 1, result.output
    errors = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "state.tensors" in errors[0], result.stderr
    assert errors[0].endswith("(default/step 30)"), errors
    assert "1 of 3 checkpoint(s) failed verification" in result.stdout
    data = json.loads(cli("checkpoints", "verify", "30", "--json").stdout)
    assert data["ok"] is False and data["checkpoints"][0]["problems"][0]["file"] == "state.tensors"
    assert cli("checkpoints", "verify", "20").exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "-s", "typo", "--json"],
        ["verify", "-s", "typo"],
        ["verify", "latest", "-s", "typo"],
        ["list", "-s", "typo"],
        ["list", "-s", "typo", "--json"],
    ],
)
def test_a_series_that_does_not_exist_is_exit_2_naming_those_that_do(
    ws: Workspace, args: list[str]
) -> None:
    _save(ws, "default", 10)
    _save(ws, "other", 5)
    result = cli("checkpoints", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "no checkpoint series 'typo'; the series are: default, other" in line, line


def test_a_series_that_exists_still_lists_and_verifies(ws: Workspace) -> None:
    _save(ws, "default", 10)
    _save(ws, "other", 5)
    listed = json.loads(cli("checkpoints", "list", "-s", "other", "--json").stdout)
    assert [(c["series"], c["step"]) for c in listed["checkpoints"]] == [("other", 5)]
    verified = json.loads(cli("checkpoints", "verify", "-s", "other", "--json").stdout)
    assert verified["ok"] and [c["step"] for c in verified["checkpoints"]] == [5]


def test_an_empty_workspace_lists_nothing_but_refuses_a_named_series(
    ws: Workspace, project: Path
) -> None:
    result = cli("checkpoints", "list")
    assert result.exit_code == 0 and "no committed checkpoints" in result.stdout
    assert cli("checkpoints", "verify").exit_code == 0
    for args in (["list", "-s", "typo"], ["verify", "-s", "typo"]):
        result = cli("checkpoints", *args)
        assert result.exit_code == 2, result.output
        assert "no checkpoint series 'typo'; there are none" in result.stderr
