"""A project folder given as the workspace, and a new workspace made by a typo, are seen."""

from __future__ import annotations

from pathlib import Path

import pytest
from accel_runner import cli

from accel.workspace import Workspace

SET = ("config", "set", "launch.max_restarts", "2")


@pytest.mark.parametrize("how", ["option", "variable"])
def test_a_project_folder_as_the_workspace_asks_for_its_accelerate(
    ws: Workspace, project: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    before = sorted(p.name for p in project.iterdir())
    if how == "option":
        result = cli("--workspace", str(project), *SET)
        given = "--workspace"
    else:
        monkeypatch.setenv("ACCEL_WORKSPACE", str(project))
        result = cli(*SET)
        given = "ACCEL_WORKSPACE"
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {given} {project} is a project folder, not a workspace; "
        f"did you mean {project / '.accelerate'}?\n"
    )
    assert sorted(p.name for p in project.iterdir()) == before
    assert not ws.config_file.exists()


def test_the_accelerate_folder_itself_is_taken(ws: Workspace, project: Path) -> None:
    result = cli("--workspace", str(project / ".accelerate"), *SET)
    assert result.exit_code == 0, result.output
    assert "created a new workspace" not in result.stderr


def test_a_command_that_creates_a_workspace_says_where(project: Path) -> None:
    typo = project / ".accelerat"
    result = cli("--workspace", str(typo), *SET)
    assert result.exit_code == 0, result.output
    assert result.stderr == f"note: created a new workspace at {typo}\n"
    again = cli("--workspace", str(typo), *SET)
    assert again.exit_code == 0 and again.stderr == ""


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (("status", "--workspace", "x"), "status"),
        (("checkpoints", "list", "-w", "x"), "checkpoints list"),
        (("clean", "--older-than", "1d", "--workspace=x"), "clean"),
    ],
)
def test_the_workspace_option_after_a_command_shows_where_it_goes(
    project: Path, args: tuple[str, ...], command: str
) -> None:
    # As git's -C, --workspace is accel's own option; docs wrote it after the command.
    result = cli(*args)
    assert result.exit_code == 2
    option = "-w" if "-w" in args else "--workspace"
    assert result.stderr == (
        f"error: no such option: {option}: it is accel's own and goes before the command: "
        f"accel --workspace PATH {command} ... (see 'accel {command} --help')\n"
    )
    assert not (project / ".accelerate").exists()


@pytest.mark.parametrize("command", [("runs",), ("runs", "show"), ("logs",), ("stack",)])
def test_reading_commands_name_a_folder_that_is_not_a_workspace(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    # `accel -w some/folder runs` said "no runs yet; start one", exit 0
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("mine\n")
    result = cli("--workspace", str(folder), *command)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {folder} is not an accel workspace (it holds todo.txt)"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["todo.txt"]
