"""A ``layout.json`` accel refuses (damaged, a version no accel writes, a newer one) is
named as such, by `accel status` too (never as an invalid config): one line, exit 2,
nothing changed. Only the layout versions this accel knows are accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accel_runner import cli

from accel import identity
from accel.errors import WorkspaceError
from accel.layout import LAYOUT_VERSION
from accel.workspace import Workspace

DAMAGED = {
    "truncated": ('{"layout_version": 1, "id": "ab', "is not valid JSON"),
    "a list": ("[1]", "is not a JSON object"),
    "no version": ('{"id": "0123456789abcdef"}', "has no layout_version"),
    "zero": ('{"layout_version": 0}', "has layout_version 0, which no accel writes"),
    "negative": ('{"layout_version": -1}', "has layout_version -1, which no accel writes"),
    "bool": ('{"layout_version": true}', "has layout_version true, not a whole number"),
    "float": ('{"layout_version": 1.0}', "has layout_version 1.0, not a whole number"),
    "string": ('{"layout_version": "1"}', 'has layout_version "1", not a whole number'),
    "null": ('{"layout_version": null}', "has layout_version null, not a whole number"),
}
FIX = 'restore it, or write {"layout_version": 1} into it if this folder is accel\'s'


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def filled(ws: Workspace) -> Workspace:
    ws.checkpoints.save({"step_data": [1]}, step=10)
    ws.cache.put("a/b", {"x": 1})
    return ws


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_status_names_a_damaged_layout_json_not_the_config(filled: Workspace, case: str) -> None:
    text, what = DAMAGED[case]
    filled.layout_file.write_text(text)
    result = cli("status")
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "INVALID" not in result.output
    _one_line(result.stderr, filled.layout_file, what)


def _one_line(stderr: str, path: Path, what: str) -> None:
    """What is wrong with ``path`` and how to fix it, in one line."""
    (line,) = stderr.splitlines()
    assert line.startswith(f"error: {path} {what}") and line.endswith(f"; {FIX}"), line


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_status_json_names_it_in_workspace_error(filled: Workspace, case: str) -> None:
    text, what = DAMAGED[case]
    filled.layout_file.write_text(text)
    result = cli("status", "--json")
    assert result.exit_code == 2 and result.stderr == "", result.output
    data = json.loads(result.stdout)
    assert data["workspace_error"].startswith(f"{filled.layout_file} {what}")
    assert data["config_valid"] is None and data["config_error"] is None
    assert data["sizes"] == {}


def test_status_refuses_a_newer_layout_as_every_command_does(filled: Workspace) -> None:
    filled.layout_file.write_text('{"layout_version": 7}')
    result = cli("status")
    assert result.exit_code == 2 and "INVALID" not in result.output, result.output
    (line,) = result.stderr.splitlines()
    assert line == (
        f"error: {filled.path} has layout version 7, newer than this accel understands "
        f"({LAYOUT_VERSION}); upgrade accel to use it"
    )
    assert cli("checkpoints", "list").stderr == result.stderr


@pytest.mark.parametrize("case", ["zero", "negative", "bool", "float", "string"])
@pytest.mark.parametrize(
    "args",
    [
        ("checkpoints", "list"),
        ("cache", "list"),
        ("runs",),
        ("clean", "--yes", "--older-than", "0s"),
        ("cache", "rm", "a/b", "--yes"),
        ("checkpoints", "rm", "10", "--yes", "--force"),
        ("config", "set", "launch.use_cpu", "true"),
    ],
)
def test_a_version_no_accel_writes_is_refused_and_nothing_changes(
    filled: Workspace, case: str, args: tuple[str, ...]
) -> None:
    text, what = DAMAGED[case]
    filled.layout_file.write_text(text)
    before = _tree(filled.path)
    result = cli(*args)
    assert result.exit_code == 2, result.output
    _one_line(result.stderr, filled.layout_file, what)
    assert _tree(filled.path) == before


def test_only_the_known_versions_are_read(project: Path) -> None:
    from accel.layout import LAYOUT_VERSIONS

    ws = Workspace.discover().ensure()
    assert sorted(LAYOUT_VERSIONS) == [1]
    marker = identity.read_marker(ws.layout_file)
    assert marker is not None and marker.version == 1
    for value in (0, -1, True, 1.0, "1", None, [1]):
        ws.layout_file.write_text(json.dumps({"layout_version": value}))
        with pytest.raises(WorkspaceError, match="layout_version"):
            identity.read_marker(ws.layout_file)
        with pytest.raises(WorkspaceError, match="layout_version"):
            Workspace.discover().ensure()
    ws.layout_file.write_text('{"layout_version": 2}')  # a newer accel's: read, then refused
    newer = identity.read_marker(ws.layout_file)
    assert newer is not None and newer.version == 2
    with pytest.raises(WorkspaceError, match="newer than this accel"):
        identity.check_version(newer, ws.path)


def test_env_check_names_a_damaged_layout_once(filled: Workspace) -> None:
    filled.layout_file.write_text('{"layout_version": 0}')
    result = cli("env", "--check", "--json")
    data = json.loads(result.stdout)
    assert [p["kind"] for p in data["problems"]] == ["layout"], data["problems"]


@pytest.mark.parametrize("through", ["-w", "ACCEL_WORKSPACE_PATH"])
def test_a_path_through_a_file_says_the_file_is_no_folder(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, through: str
) -> None:
    """It said `.../layout.json cannot be read (Not a directory); restore it, or write
    {"layout_version": 1} into it`: a fix that cannot work, for a file in the path."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "afile").write_text("mine\n")
    folder = outside / "afile" / "x"
    before = _tree(ws.path)
    if through == "-w":
        result = cli("-w", str(folder), "status")
    else:
        monkeypatch.setenv("ACCEL_WORKSPACE_PATH", str(folder))
        result = cli("status")
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {folder} cannot be a workspace folder: {outside / 'afile'} is a file, "
        "not a folder; give a folder\n"
    )
    assert [p.name for p in outside.iterdir()] == ["afile"]
    assert (outside / "afile").read_text() == "mine\n" and _tree(ws.path) == before
