"""A ``workspace.path`` that no command has written to yet (or whose folder was removed)
is an empty workspace, as a ``.accelerate`` not made yet is: ``status``, ``env --check``
and ``clean`` read it as such and make nothing. A link to a folder that is gone (a disk
not mounted) is not empty: it is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.workspace import Workspace

CLEAN = ("clean", "--older-than", "0s", "--keep-last", "0")


@pytest.fixture
def data(project: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The project's relocated data folder, named by the config, not made."""
    assert main(["config", "set", "workspace.path", "data"]) == 0
    capsys.readouterr()
    return project / "data"


def _removed(data: Path) -> None:
    Workspace.discover().ensure()
    assert (data / "accel-data.json").is_file()
    shutil.rmtree(data)


@pytest.mark.parametrize("made", [None, _removed], ids=["not-made-yet", "removed"])
def test_a_missing_data_folder_reads_as_an_empty_workspace(
    data: Path, capsys: pytest.CaptureFixture[str], made: object
) -> None:
    if made is not None:
        _removed(data)
    assert main(["status", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["workspace_error"] is None and found["left_alone"] == []
    assert {k: v for k, v in found["sizes"].items() if k != "config"} == dict.fromkeys(
        ("cache", "checkpoints", "logs", "runs", "state"), 0
    )
    assert main(["status"]) == 0
    assert "0 B" in capsys.readouterr().out
    assert main(["env", "--check", "--json"]) in (0, 1)  # 1: this machine's own problems
    kinds = {p["kind"] for p in json.loads(capsys.readouterr().out)["problems"]}
    assert not kinds & {"workspace_layout", "not_a_workspace", "layout", "unreadable"}
    assert main([*CLEAN, "--dry-run"]) == 0
    assert main([*CLEAN, "--yes"]) == 0
    assert "nothing to clean" in capsys.readouterr().out
    assert not os.path.lexists(data)


def test_a_data_folder_that_links_to_nothing_is_refused_in_one_line(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "unmounted" / "data"
    data.symlink_to(gone, target_is_directory=True)
    says = f"the data folder {data} is a link to {gone}, which does not exist"
    for args in (["status"], [*CLEAN, "--dry-run"], [*CLEAN, "--yes"]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(f"error: {says}") and err.count("\n") == 1, err
    assert main(["status", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["workspace_error"].startswith(says)
    assert main(["env", "--check", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert [p["kind"] for p in problems if says in p["message"]] == ["workspace_layout"]
    assert not os.path.lexists(gone) and not os.path.lexists(gone.parent)
