"""accel.runs: the typed record of run.json and its status enum."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from accel.layout import Layout
from accel.runs import RunRecord, RunStatus, read_run, write_record
from accel.runs.status import parse

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "accel" / "runs"


@pytest.mark.parametrize("status", list(RunStatus))
def test_a_status_is_written_as_the_plain_text_it_always_was(
    tmp_path: Path, status: RunStatus
) -> None:
    write_record(tmp_path, {"id": tmp_path.name, "status": status})
    text = (tmp_path / "run.json").read_text()
    assert f'"status": "{status.value}"' in text
    assert json.loads(text)["status"] == status.value
    assert f"{status}" == str(status) == status.value  # shown as the value, never the name


def test_a_known_status_reads_as_the_enum_and_an_unknown_one_stays_text() -> None:
    assert parse("hung") is RunStatus.HUNG
    assert parse("paused-by-a-newer-accel") == "paused-by-a-newer-accel"
    assert parse(3) is None and parse(None) is None


def test_read_run_types_the_status_and_derives_crashed(tmp_path: Path) -> None:
    layout = Layout(tmp_path, tmp_path)
    for run_id, stored in (("a", "failed"), ("b", "running"), ("c", "odd"), ("d", 7)):
        (layout.runs_dir / run_id).mkdir(parents=True)
        write_record(layout.runs_dir / run_id, {"id": run_id, "status": stored})
    assert read_run(layout, "a").status is RunStatus.FAILED
    assert read_run(layout, "b").status is RunStatus.CRASHED  # no launcher holds it
    assert read_run(layout, "c").status == "odd"
    assert read_run(layout, "d").status is RunStatus.CRASHED


def test_from_json_leaves_fields_of_the_wrong_type_unset() -> None:
    record = RunRecord.from_json(
        "r", Path("/nowhere"), {"exit_code": True, "world_size": "4", "name": 5}, live=True
    )
    assert record.status is RunStatus.RUNNING
    assert (record.exit_code, record.world_size, record.name) == (None, None, None)


def test_the_runs_package_never_reaches_above_its_floor() -> None:
    """It takes a Layout: no workspace facade, no launcher, no CLI (not even for types)."""
    above = ("accel.workspace", "accel.launch", "accel.cli", "accel.clean", "accel.sync")
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert found == []
