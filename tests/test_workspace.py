from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from accel.errors import WorkspaceError
from accel.workspace import Workspace, find_workspace


def test_discovery_prefers_flag_then_env_then_parents_then_cwd(tmp_path: Path) -> None:
    (tmp_path / "a" / ".accelerate").mkdir(parents=True)
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    env = {"ACCEL_WORKSPACE": str(tmp_path / "envws")}
    assert find_workspace(deep, env, tmp_path / "flagws") == tmp_path / "flagws"
    assert find_workspace(deep, env) == tmp_path / "envws"
    assert find_workspace(deep, {}) == tmp_path / "a" / ".accelerate"
    assert find_workspace(tmp_path, {}) == tmp_path / ".accelerate"


def test_relative_paths_resolve_against_cwd(tmp_path: Path) -> None:
    assert find_workspace(tmp_path, {"ACCEL_WORKSPACE": "ws"}) == tmp_path / "ws"
    assert find_workspace(tmp_path, {}, "x/../y") == tmp_path / "y"


def test_nearest_workspace_wins(tmp_path: Path) -> None:
    (tmp_path / ".accelerate").mkdir()
    (tmp_path / "sub" / ".accelerate").mkdir(parents=True)
    assert find_workspace(tmp_path / "sub", {}) == tmp_path / "sub" / ".accelerate"


def test_discover_reads_nothing_and_creates_nothing(project: Path) -> None:
    ws = Workspace.discover()
    assert ws.path == project / ".accelerate"
    assert not ws.exists
    assert ws.config["launch.num_processes"] == 1
    assert not ws.path.exists()


def test_discover_from_start_folder(project: Path) -> None:
    (project / ".accelerate").mkdir()
    (project / "src").mkdir()
    assert Workspace.discover(project / "src").path == project / ".accelerate"


def test_ensure_creates_layout_and_version_marker(project: Path) -> None:
    ws = Workspace.discover().ensure()
    for part in ("config", "cache", "checkpoints", "logs/runs", "locks", "tmp"):
        assert (ws.path / part).is_dir()
    marker = json.loads(ws.layout_file.read_text())
    assert marker == {"layout_version": 1, "id": marker["id"]} and len(marker["id"]) == 16
    ws.ensure()  # idempotent
    assert json.loads(ws.layout_file.read_text()) == marker


def test_newer_layout_is_refused_not_misread(project: Path) -> None:
    ws = Workspace.discover().ensure()
    ws.layout_file.write_text('{"layout_version": 7}')
    with pytest.raises(WorkspaceError, match="layout version 7, newer than this accel"):
        Workspace.discover().ensure()
    with pytest.raises(WorkspaceError, match="upgrade accel"):
        _ = Workspace.discover().config


def test_workspace_path_relocates_data(project: Path, tmp_path: Path) -> None:
    ws = Workspace.discover().ensure()
    ws.config_file.write_text(f"workspace:\n  path: {tmp_path / 'elsewhere'}\n")
    ws = Workspace.discover()
    assert ws.cache_dir == tmp_path / "elsewhere" / "cache"
    assert ws.state_file == tmp_path / "elsewhere" / "state.bin"
    assert ws.config_file.parent == project / ".accelerate" / "config"


def test_a_new_workspace_comes_with_a_gitignore(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / ".accelerate").ensure()
    text = (ws.path / ".gitignore").read_text()
    assert text.splitlines()[1:] == [
        "*",
        "!.gitignore",
        "!config/",
        "!config/accelerate_config.yaml",
    ]
    (ws.path / ".gitignore").write_text("mine\n")  # the user's edits are kept
    ws.ensure()
    assert (ws.path / ".gitignore").read_text() == "mine\n"


@pytest.mark.parametrize("committed", [False, True])
def test_a_workspace_made_in_a_cloned_config_folder_gets_one_too(
    tmp_path: Path, committed: bool
) -> None:
    # A clone of a project that committed its config but no .gitignore (or an empty
    # .accelerate/): the workspace made there keeps checkpoints and logs out of git too.
    (tmp_path / ".accelerate" / "config").mkdir(parents=True)
    if committed:
        (tmp_path / ".accelerate" / "config" / "accelerate_config.yaml").write_text("version: 1\n")
    ws = Workspace(tmp_path / ".accelerate").ensure()
    assert (ws.path / ".gitignore").read_text().splitlines()[1] == "*"


def test_an_older_workspace_is_not_given_one_behind_its_back(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / ".accelerate").ensure()
    (ws.path / ".gitignore").unlink()  # the user's choice, or a workspace made before it
    ws = Workspace(tmp_path / ".accelerate").ensure()
    assert not (ws.path / ".gitignore").exists()
    ws.ensure_gitignore()  # what `accel config --default` does
    assert (ws.path / ".gitignore").is_file()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.timeout(60)
def test_git_tracks_the_config_and_nothing_else(project: Path, accel_exe: list[str]) -> None:
    def run(*argv: str) -> str:
        done = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("git", "init", "-q")
    run(*accel_exe, "config", "--default")
    ws = Workspace.discover()
    ws.cache.put("weights", b"x" * 100)
    (ws.runs_dir / "20260101-000000-aaaaaa").mkdir(parents=True)
    (ws.runs_dir / "20260101-000000-aaaaaa" / "rank-0.log").write_text("hello\n")
    (ws.path / "config" / "notes.tmp").write_text("scratch\n")
    listed = run("git", "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(listed) == [
        "?? .accelerate/.gitignore",
        "?? .accelerate/config/accelerate_config.yaml",
    ]


@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_a_blank_workspace_variable_is_refused_not_read_as_unset(
    tmp_path: Path, blank: str
) -> None:
    from accel.errors import UsageError

    with pytest.raises(UsageError, match="ACCEL_WORKSPACE is set but empty: unset it"):
        find_workspace(tmp_path, {"ACCEL_WORKSPACE": blank})
    with pytest.raises(UsageError, match="the workspace path is empty"):
        find_workspace(tmp_path, {}, blank)
