"""accel's own error lines never quote a secret: usage errors, launch.env's messages,
a bad --env (the command line's values, ACCEL_LAUNCH_ENV's and the config's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from accel_runner import cli

from accel.workspace import Workspace


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (
            ["config", "set", "launch.env", "HF_TOKEN=a", "WANDB_API_KEY=mysekritB"],
            "unexpected extra argument(s) (WANDB_API_KEY=***) (see 'accel config set --help')",
        ),
        (
            ["config", "set", "launch.env", "DB_PASSWORD=Hunter,mysekritTail"],
            "part 2 of 2 has no '='",
        ),
        (
            ["launch", "--dry-run", "--env", "9HF_TOKEN=mysekritName", "x.py"],
            "invalid --env name '9HF_TOKEN' (letters",
        ),
        (["launch", "--dry-run", "--env", "HF_TOKEN", "x.py"], "has no '=': give --env KEY="),
    ],
)
def test_an_error_line_quotes_no_secret(project: Path, args: list[str], shown: str) -> None:
    Workspace(project / ".accelerate").ensure()
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert shown in result.stderr and "mysekrit" not in result.output + result.stderr


@pytest.mark.parametrize("command", [["config", "show"], ["config", "validate"], ["status"]])
def test_a_value_of_the_wrong_type_is_never_quoted(ws: Workspace, command: list[str]) -> None:
    ws.config_file.write_text("version: 1\nlaunch:\n  env:\n    HF_TOKEN: [mysekritList]\n")
    result = cli(*command)
    assert "value of HF_TOKEN must be a string, got a list" in result.stderr + result.stdout
    assert "mysekrit" not in result.stdout + result.stderr


def test_accel_launch_env_that_does_not_parse_is_never_quoted(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_LAUNCH_ENV", "DB_PASSWORD=Hunter,mysekritTail")
    for command in (["config", "show"], ["status"], ["launch", "--dry-run", "x.py"]):
        result = cli(*command)
        assert "part 2 of 2 has no '='" in result.stderr, command
        assert "mysekrit" not in result.stdout + result.stderr, command
