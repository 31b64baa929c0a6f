"""An ``ACCEL_*`` variable accel does not read gets one did-you-mean line, not silence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.config import schema
from accel.config.resolve import OWN_ENV_VARS, env_warnings

SRC = Path(__file__).resolve().parents[2] / "src" / "accel"


def test_a_typo_of_a_twin_is_named_with_the_right_name() -> None:
    lines = env_warnings({"ACCEL_LAUNCH_NUM_PROCESS": "4", "ACCEL_RUN_ID": "x", "HOME": "/"})
    assert lines == [
        "environment variable ACCEL_LAUNCH_NUM_PROCESS is not one accel reads, so it is "
        "ignored; did you mean ACCEL_LAUNCH_NUM_PROCESSES?"
    ]


def test_every_variable_accel_reads_is_known() -> None:
    env = {f.env_var: "1" for f in schema.FIELDS} | dict.fromkeys(OWN_ENV_VARS, "1")
    assert env_warnings(env) == []


def test_the_own_list_is_every_accel_name_in_the_source() -> None:
    names = set()
    for path in SRC.rglob("*.py"):
        names |= set(re.findall(r"(?<![A-Za-z0-9_])ACCEL_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    twins = {f.env_var for f in schema.FIELDS}
    assert names - twins == set(OWN_ENV_VARS)


def test_the_cli_warns_once_and_still_runs(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_LAUNCH_NUM_PROCESS", "4")
    assert main(["config", "show"]) == 0
    err = capsys.readouterr().err
    assert err.count("ACCEL_LAUNCH_NUM_PROCESS ") == 1 and "ACCEL_LAUNCH_NUM_PROCESSES?" in err
