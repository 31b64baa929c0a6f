"""Reading commands survive a broken config, and runs left by a dead launcher heal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.runs import read_run, run_lock
from accel.workspace import Workspace

RUN = "20261129-100000-aaaaaa"


def _run(root: Path, run_id: str = RUN, status: str = "succeeded") -> Path:
    folder = root / "logs" / "runs" / run_id
    folder.mkdir(parents=True)
    record = {"id": run_id, "status": status, "world_size": 1, "exit_code": 0}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "rank-0.log").write_text("hello from rank 0\n")
    return folder


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def broken(project: Path) -> Workspace:
    ws = Workspace(project / ".accelerate").ensure()
    _run(ws.path)
    ws.config_file.write_text("launch:\n  num_procesess: 2\n")
    return ws


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (("runs",), RUN),
        (("runs", "--json"), RUN),
        (("logs",), "[rank0] hello from rank 0"),
        (("runs", "show"), f"run {RUN}"),
        (("status", "--json"), '"config_valid": false'),
        (("env", "--json"), '"valid": false'),
    ],
)
def test_read_only_commands_work_with_a_broken_config(
    broken: Workspace, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], shown: str
) -> None:
    code, out, err = _cli(capsys, *args)
    assert code == 0, err
    assert shown in out
    assert "warning:" in err and "num_procesess" in err and "error:" not in err


def test_stack_gets_past_a_broken_config(
    broken: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "stack")
    assert code == 2 and f"error: run {RUN} is not running" in err  # about the run, not config
    assert "warning:" in err and "num_procesess" in err


def test_a_relocated_workspace_is_still_found_when_another_key_is_broken(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    elsewhere = tmp_path / "data"
    _run(elsewhere, "20261129-110000-bbbbbb")
    ws.config_file.write_text(f"workspace:\n  path: {elsewhere}\nlaunch:\n  use_cpu: maybe\n")
    code, out, err = _cli(capsys, "runs")
    assert code == 0 and "20261129-110000-bbbbbb" in out and "use_cpu" in err


def test_writing_commands_still_refuse_a_broken_config(
    broken: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "clean", "--dry-run")
    assert code == 2 and "num_procesess" in err


@pytest.mark.parametrize("command", [("runs",), ("status",), ("clean", "--dry-run"), ("env",)])
def test_the_first_command_that_notices_marks_a_dead_run_crashed(
    project: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    folder = _run(ws.path, status="running")
    (folder / "rank-0.log").write_text("last words\n")
    ws.lock_path(f"run-{RUN}").touch()  # the launcher made it, then died (lock free)
    code, _, err = _cli(capsys, *command)
    from accel.runs import mark_crashed

    assert code == 0, err
    assert f"accel: run {RUN} was left running by a launcher that is gone" in err
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "crashed" and record["ended_at"] and record["crashed"]
    assert mark_crashed(ws.layout) == []


def test_a_live_run_is_never_marked(project: Path) -> None:
    from accel.runs import mark_crashed

    ws = Workspace(project / ".accelerate").ensure()
    folder = _run(ws.path, status="running")
    with run_lock(ws.layout, RUN):
        assert mark_crashed(ws.layout) == []
        assert read_run(ws.layout, RUN).status == "running"
    assert json.loads((folder / "run.json").read_text())["status"] == "running"
    assert mark_crashed(ws.layout) == [RUN]
