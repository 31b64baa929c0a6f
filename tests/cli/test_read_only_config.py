"""`accel checkpoints list|show|verify` and `accel cache list` go on with a broken config
(one warning, then their output, with the valid part of the config); the commands that
write or delete still refuse it, exit 2, and change nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from accel_runner import cli

from accel.workspace import Workspace

BROKEN = {
    "unknown key": "launch:\n  num_procesess: 2\n",
    "bad value": "checkpoints:\n  keep_last: -3\n",
    "broken yaml": "launch: [\n",
    "not a mapping": "- launch\n",
}
READERS = {
    "checkpoints list": (("checkpoints", "list"), "1 checkpoint(s), "),
    "checkpoints verify": (("checkpoints", "verify"), "verified 1 checkpoint(s)"),
    "checkpoints show": (("checkpoints", "show", "10"), "checkpoint  default step 10"),
    "cache list": (("cache", "list"), "datasets/index"),
}


def _fill(ws: Workspace) -> None:
    ws.checkpoints.save({"step_data": [1, 2, 3]}, step=10)
    ws.cache.put("datasets/index", {"shards": [1, 2]})


@pytest.fixture
def filled(ws: Workspace) -> Workspace:
    _fill(ws)
    return ws


def _validation_error() -> str:
    """The line `accel config validate` gives for the config as it is."""
    result = cli("config", "validate")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    return line.removeprefix("error: ")


def _tree(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size if p.is_file() else -1
        for p in sorted(root.rglob("*"))
        if "locks" not in p.parts
    }


@pytest.mark.parametrize("broken", sorted(BROKEN))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reader_goes_on_with_one_warning(filled: Workspace, broken: str, reader: str) -> None:
    filled.config_file.write_text(BROKEN[broken])
    expected = _validation_error()
    args, shown = READERS[reader]
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    assert shown in result.stdout, result.stdout
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(f"warning: {expected} (read-only: going on "), warning


@pytest.mark.parametrize("broken", sorted(BROKEN))
@pytest.mark.parametrize(
    "args",
    [
        ("checkpoints", "list", "--json"),
        ("checkpoints", "verify", "--json"),
        ("checkpoints", "show", "10", "--json"),
        ("cache", "list", "--json"),
    ],
)
def test_json_stays_json_with_the_warning_on_stderr(
    filled: Workspace, broken: str, args: tuple[str, ...]
) -> None:
    filled.config_file.write_text(BROKEN[broken])
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data
    assert result.stderr.startswith("warning: ") and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ("checkpoints", "rm", "10", "--yes", "--force"),
        ("cache", "rm", "datasets/index", "--yes"),
        ("clean", "--yes", "--older-than", "0s"),
        ("checkpoints", "export", "-o", "out.pt"),
        ("launch", "train.py"),
    ],
)
def test_what_writes_still_refuses_and_changes_nothing(
    filled: Workspace, project: Path, args: tuple[str, ...]
) -> None:
    (project / "train.py").write_text("print('trained')\n")
    filled.config_file.write_text(BROKEN["bad value"])
    before = _tree(filled.path)
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == ["error: " + _validation_error()]
    assert _tree(filled.path) == before
    assert not (project / "out.pt").exists()


def test_the_relocated_data_is_read_where_workspace_path_is_valid(
    project: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    ws = Workspace(project / ".accelerate").ensure()
    ws.config_file.write_text(f"workspace:\n  path: {data}\n")
    _fill(Workspace.discover().ensure())
    ws.config_file.write_text(f"workspace:\n  path: {data}\nlaunch:\n  use_cpu: maybe\n")
    listed = cli("checkpoints", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert json.loads(listed.stdout)["checkpoints_dir"] == str(data / "checkpoints")
    assert "use_cpu" in listed.stderr and "the data is read at" not in listed.stderr
    cached = cli("cache", "list")
    assert cached.exit_code == 0 and "datasets/index" in cached.stdout, cached.stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("workspace:\n  path: DATA\nlaunch: [\n", "going on without that file"),
        ("workspace:\n  path: [DATA]\n", "going on with workspace.path as if unset"),
    ],
)
def test_the_warning_says_where_the_data_is_read_when_workspace_path_is_lost(
    project: Path, tmp_path: Path, text: str, said: str
) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    ws.config_file.write_text(text.replace("DATA", str(tmp_path / "data")))
    result = cli("checkpoints", "list")
    assert result.exit_code == 0, result.stderr
    (warning,) = result.stderr.splitlines()
    assert f"(read-only: {said}; the data is read at {ws.path})" in warning, warning


def test_the_valid_settings_stand_and_the_invalid_ones_fall_back(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    ws.config_file.write_text(
        "store:\n  lock_timeout: 7\ncheckpoints:\n  keep_last: -3\n  async_save: true\n"
    )
    monkeypatch.setenv("ACCEL_LAUNCH_USE_CPU", "maybe")
    fresh = Workspace.discover(env=os.environ)
    salvaged = fresh.salvage_config()
    assert salvaged is not None and "keep_last" in str(salvaged.error)
    assert salvaged.fell_back == ("checkpoints.keep_last", "launch.use_cpu")
    settings = fresh.reading_settings()
    assert settings.store.lock_timeout == 7 and fresh.lock_timeout == 7
    assert settings.checkpoints.async_save is True and settings.checkpoints.keep_last == 3
    assert settings.launch.use_cpu is False
    with pytest.raises(Exception, match="keep_last"):
        _ = fresh.settings  # what writes still sees the config invalid
