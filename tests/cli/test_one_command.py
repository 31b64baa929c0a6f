"""`accel X ...` builds only command X: typer builds every command's parameters before
it runs one (about 20 ms of each start-up), so main() hands it an app holding the one
the command line names, and the whole app wherever that is not plain."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from accel_runner import cli

from accel.cli import main as main_module
from accel.cli.main import _app_for, app


def _names(one: typer.Typer) -> list[str | None]:
    return [c.name for c in one.registered_commands] + [g.name for g in one.registered_groups]


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["clean", "--older-than", "7d", "--dry-run"], "clean"),
        (["-w", "p/.accelerate", "runs", "show"], "runs"),
        (["--workspace", "p/.accelerate", "status"], "status"),
        (["--workspace=p/.accelerate", "status", "--json"], "status"),
        (["-wp/.accelerate", "checkpoints", "list"], "checkpoints"),
        (["launch", "-n", "2", "train.py", "--help"], "launch"),
    ],
)
def test_a_plain_command_line_builds_only_its_command(argv: list[str], name: str) -> None:
    assert _names(_app_for(argv)) == [name]
    assert len(_names(app)) > 10  # the app itself is left whole


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["-h", "clean"],
        ["--version"],
        ["--show-completion", "bash"],
        ["clen"],  # did-you-mean needs the other names
        ["help", "clean"],  # help walks the whole tree
        ["-w"],
        ["--", "clean"],
    ],
)
def test_anything_else_builds_the_whole_app(argv: list[str]) -> None:
    assert _app_for(argv) is app


@pytest.mark.parametrize(
    "line",
    [
        ("clean", "--older-than", "7"),
        ("clean", "--bogus"),
        ("runs", "nosuch"),
        ("runs",),
        ("config", "set", "launch.num_processes", "abc"),
        ("launch", "-n", "0", "train.py"),
        ("launch",),
        ("status", "extra"),
        ("checkpoints",),
        ("-w", "", "status"),
    ],
)
def test_one_command_answers_as_the_whole_app(
    line: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    one = cli(*line)
    monkeypatch.setattr(main_module, "_app_for", lambda argv: app)
    whole = cli(*line)
    assert (one.exit_code, one.stdout, one.stderr) == (whole.exit_code, whole.stdout, whole.stderr)
    assert one.stdout or one.stderr
