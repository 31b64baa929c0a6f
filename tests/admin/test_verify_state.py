"""verify passes exactly what loading accepts: a checkpoint whose manifest lists no
state.tensors (``"files": {}``) is damaged, as ``load_state`` says, not "all match";
and ``--series`` naming no series is bad input, not a pass on nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.admin.verify import require_series, verify_series
from accel.errors import IntegrityError, UsageError


def _save(ws: Workspace, *steps: int) -> None:
    for step in steps:
        ws.checkpoints.save({"w": torch.full((2,), float(step))}, step)


def _edit(ws: Workspace, step: int, change: Callable[[dict[str, Any]], None]) -> None:
    path = ws.checkpoints.series_dir() / f"step-{step:012d}" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def _no_files(m: dict[str, Any]) -> None:
    m["files"] = {}


def _only_a_rank_file(m: dict[str, Any]) -> None:
    m["files"] = {"rank-0.tensors": m["files"]["state.tensors"]}


@pytest.mark.parametrize("change", [_no_files, _only_a_rank_file])
def test_a_checkpoint_without_state_tensors_fails_verification(
    ws: Workspace, change: Callable[[dict[str, Any]], None]
) -> None:
    _save(ws, 10, 20, 30)
    _edit(ws, 30, change)
    folder = ws.checkpoints.series_dir() / "step-000000000030"
    if change is _only_a_rank_file:  # the file is there, whole, under that name
        (folder / "state.tensors").rename(folder / "rank-0.tensors")
    with pytest.raises(IntegrityError, match="no state.tensors"):
        ws.checkpoints.load(30)  # what a resume does with it
    report = verify_series(ws, None, None)
    assert not report.ok
    (failed,) = report.failed
    assert failed.step == 30
    assert [p.file for p in failed.problems] == ["state.tensors"]
    assert "not listed in its manifest" in failed.problems[0].problem
    assert not verify_series(ws, 30, None).ok
    assert verify_series(ws, 20, None).ok


def test_require_series_names_the_series_there_are(ws: Workspace) -> None:
    require_series(ws, None)  # nothing to require, with or without series
    with pytest.raises(UsageError, match="no checkpoint series 'typo'; there are none"):
        require_series(ws, "typo")
    _save(ws, 1)
    require_series(ws, "default")
    with pytest.raises(UsageError, match="no checkpoint series 'typo'; the series are: default"):
        require_series(ws, "typo")
    with pytest.raises(UsageError, match="invalid run name"):
        require_series(ws, "../x")
    with pytest.raises(UsageError, match="no checkpoint series 'typo'"):
        verify_series(ws, None, "typo")
