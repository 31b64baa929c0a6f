"""A part of the workspace that is a link out of it (``checkpoints/`` or ``logs/runs/`` on
another disk): the plan leaves what is there alone, as the clean itself does."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from clean_factory import DAY, age_tree, checkpoint, entry, run, tree_digest, workspace

from accel.clean import clean, execute
from accel.cli.main import main
from accel.workspace import Workspace

RUN = "20200101-000000-aaaaaa"
CLEAN = ("clean", "--older-than", "1d", "--keep-last", "0", "--json")


def _old_state(ws: Workspace, now: float) -> None:
    for step in (1, 2):
        checkpoint(ws, "default", step, created=now - 9 * DAY)
    folder = run(ws, RUN, started="2020-01-01T00:00:00Z", ended="2020-01-01T01:00:00Z")
    age_tree(folder, now - 9 * DAY)


def _link_out(ws: Workspace, part: str, tmp_path: Path) -> tuple[Path, Path]:
    folder = ws.path / part
    outside = tmp_path / "elsewhere" / part.replace("/", "-")
    outside.parent.mkdir(exist_ok=True)
    shutil.move(folder, outside)
    folder.symlink_to(outside, target_is_directory=True)
    return folder, outside


def _clean(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main([*CLEAN, *args]) == 0, capsys.readouterr()
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


@pytest.mark.parametrize("part", ["checkpoints", "logs/runs"])
def test_a_linked_part_is_planned_as_it_is_cleaned(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], part: str
) -> None:
    ws = workspace(project)
    _old_state(ws, time.time())
    folder, outside = _link_out(ws, part, tmp_path)
    before = tree_digest(outside)
    plan = _clean(capsys, "--dry-run")
    planned = {item["path"] for item in plan["items"]}
    behind_link = {
        k["path"]: k["reason"] for k in plan["kept"] if k["path"].startswith(f"{folder}/")
    }
    assert behind_link and set(behind_link.values()) == {"outside the workspace"}
    assert not any(path.startswith(f"{folder}/") for path in planned)
    done = _clean(capsys, "--yes")
    assert set(done["removed"]) == planned and done["skipped"] == []
    assert done["freed_bytes"] == plan["total_bytes"]
    assert tree_digest(outside) == before


def test_the_dry_run_lists_a_linked_part_under_left_alone(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = workspace(project)
    _old_state(ws, time.time())
    folder, _ = _link_out(ws, "checkpoints", tmp_path)
    assert main(["clean", "--older-than", "1d", "--keep-last", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    left_alone, would_remove = out.split("Left alone (never removed)")[1].split("Would remove")
    assert f"{folder}/default/step-000000000001" in left_alone
    assert "outside the workspace" in left_alone
    assert "step-" not in would_remove and RUN in would_remove


def test_a_part_linked_out_after_the_plan_is_kept_by_the_same_rule(
    project: Path, tmp_path: Path
) -> None:
    ws = workspace(project)
    _old_state(ws, time.time())
    plan = clean(ws, older_than="1d", keep_last=0, dry_run=True).plan
    assert {p.item.kind for p in plan.items} == {"checkpoint", "run"}
    folder, outside = _link_out(ws, "checkpoints", tmp_path)
    result = execute(ws, plan)
    assert {(s.path.parent, s.reason) for s in result.skipped} == {
        (folder / "default", "outside the workspace")
    }
    assert sorted(p.name for p in (outside / "default").iterdir()) == [
        "step-000000000001",
        "step-000000000002",
    ]


def test_checkpoints_rm_plans_a_linked_part_as_it_removes(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = workspace(project)
    _old_state(ws, time.time())
    _, outside = _link_out(ws, "checkpoints", tmp_path)
    before = tree_digest(outside)
    assert main(["checkpoints", "rm", "1", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["items"] == [] and [k["reason"] for k in plan["kept"]] == ["outside the workspace"]
    assert main(["checkpoints", "rm", "1", "--yes"]) == 1
    assert "keeping default/step-000000000001: outside the workspace" in capsys.readouterr().err
    assert tree_digest(outside) == before


def _hand_made_marker(folder: Path, kind: str, target: Path) -> None:
    """The owner marker of an accel folder replaced by hand: a link out, or a FIFO."""
    marker = folder / ".accel-owned"
    marker.unlink(missing_ok=True)
    if kind == "link":
        marker.symlink_to(target)
    else:
        os.mkfifo(marker)


@pytest.mark.timeout(30)  # a FIFO opened for writing waited for a reader for ever
@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_hand_made_owner_marker_is_replaced_never_opened(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Removing a folder puts the owner marker in first: it made the target of a marker
    linked out of the workspace (before: an empty file at that path), and it hung on a
    FIFO there. Saving over a committed step does the same to the old copy."""
    ws = workspace(project)
    now = time.time()
    folder = entry(ws, "data", created=now - 9 * DAY)
    target = tmp_path / "elsewhere" / "never-made"
    target.parent.mkdir()
    _hand_made_marker(folder, kind, target)
    done = _clean(capsys, "--yes", "--only", "cache")
    assert done["removed"] == [str(folder)] and done["skipped"] == []
    assert not folder.exists()

    ws.checkpoints.save({"w": 1}, step=3)
    step = ws.checkpoints_dir / "default" / "step-000000000003"
    _hand_made_marker(step, kind, target)
    ws.checkpoints.save({"w": 2}, step=3)
    assert ws.checkpoints.load(step=3) == {"w": 2}
    assert list(target.parent.iterdir()) == []
