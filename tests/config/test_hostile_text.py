"""Text no YAML may hold (a control character: NUL, BEL, ESC, DEL, a form feed) in any
YAML accel reads is an invalid configuration like any other: one line naming the file,
the line and the column, exit 2, nothing written; never a crash, and never a crash of
the crash handler. With it: ``version: true`` and the count of a cut-short value."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.workspace import Workspace

CONTROLS = ["\x00", "\x01", "\x07", "\x0c", "\x1b", "\x7f"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refused(ws: Workspace, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """What `accel config validate` says of a project file holding ``text``."""
    ws.config_file.write_text(text)
    code, _, err = run(capsys, "config", "validate")
    assert code == 2, err
    return err


def no_crash_log(ws: Workspace) -> None:
    cache = Path(os.environ["XDG_CACHE_HOME"])
    assert not (cache / "accel" / "crash").exists()
    assert not list(ws.path.rglob("crash-*"))


@pytest.mark.parametrize("char", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_a_control_character_in_the_project_file_is_one_line_naming_where(
    ws: Workspace, capsys: pytest.CaptureFixture[str], char: str
) -> None:
    err = refused(ws, capsys, f"version: 1\nlaunch:\n  num_processes: 2{char}\n")
    assert err == (
        f"error: {ws.config_file}:3: invalid YAML: control character U+{ord(char):04X} "
        "at column 19, which YAML does not allow; remove it\n"
    )
    no_crash_log(ws)


def test_its_line_and_column_count_as_yaml_counts_them() -> None:
    from accel.config.yamlio import load_yaml_text
    from accel.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^f\.yaml:3: .* U\+001B at column 14,"):
        load_yaml_text("version: 1\r\nlaunch:\r\n  run_name: a\x1b\r\n", "f.yaml")


def test_readers_go_on_with_a_warning_and_writers_refuse_it_changing_nothing(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "version: 1\nlaunch:\n  num_processes: 2\x01\n"
    ws.config_file.write_text(text)
    code, out, err = run(capsys, "status")
    assert code == 0, err
    assert f"warning: {ws.config_file}:3: invalid YAML: control character U+0001" in err
    assert "unexpected" not in err and "workspace" in out
    for args in (
        ("config", "unset", "launch.num_processes"),
        ("config", "set", "logs.level", "debug"),
    ):
        code, _, err = run(capsys, *args)
        assert code == 2, (args, err)
        assert err.count("\n") == 1 and "U+0001 at column 19" in err, err
    code, out, _ = run(capsys, "env", "--check")
    assert "problem: config: " in out and "U+0001" in out and "unexpected" not in out
    assert ws.config_file.read_text() == text
    no_crash_log(ws)


def test_a_user_file_and_an_imported_file_with_one_are_refused_by_name(
    ws: Workspace,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("compute_environment: LOCAL_MACHINE\nnum_processes: 2\x1b\n")
    code, _, err = run(capsys, "config", "import", str(bad))
    assert code == 2, err
    assert err.startswith(f"error: {bad}:2: invalid YAML: control character U+001B"), err
    assert not ws.config_file.exists()
    monkeypatch.setenv("ACCEL_USER_CONFIG", str(bad))
    code, _, err = run(capsys, "config", "validate")
    assert code == 2, err
    assert err.startswith(f"error: {bad}:2: invalid YAML: control character U+001B"), err
    no_crash_log(ws)


def test_a_value_with_one_is_refused_as_a_value(
    ws: Workspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(capsys, "config", "set", "launch.env", "{A: \x01x}")
    assert code == 2, err
    assert err == (
        "error: invalid value for launch.env: control character U+0001 at column 5, "
        "which YAML does not allow; remove it\n"
    )
    assert not ws.config_file.exists()
    monkeypatch.setenv("ACCEL_LAUNCH_ENV", "{A: \x07}")
    code, _, err = run(capsys, "status")
    assert code == 0, err
    assert "warning: environment variable ACCEL_LAUNCH_ENV: control character U+0007" in err
    no_crash_log(ws)


def test_the_crash_handler_survives_an_environment_it_cannot_parse(
    ws: Workspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # it parsed ACCEL_LAUNCH_ENV again to redact, and crashed with a chained traceback
    import accel.status

    def boom(ws: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(accel.status, "collect", boom)
    monkeypatch.setattr(sys, "argv", ["accel", "status"])
    monkeypatch.setenv("ACCEL_LAUNCH_ENV", "{A: \x07}")
    code, _, err = run(capsys, "status")
    assert code == 1, err
    (line,) = [x for x in err.splitlines() if x.startswith("error: ")]
    assert line.startswith("error: unexpected RuntimeError: kaboom; the traceback is in "), err
    assert "Traceback" not in err


def test_redaction_reads_a_launch_env_it_cannot_parse_as_unparsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accel.config import schema
    from accel.crashlog import crash_text
    from accel.env.probe import launch_env_pairs

    def broken(*args: object) -> object:
        raise RuntimeError("a parser's bug")

    monkeypatch.setattr(schema, "parse_text", broken)
    env = {"ACCEL_LAUNCH_ENV": "HF_TOKEN=hf_x1y2z3", "DB_PASSWORD": "hunter22"}
    assert launch_env_pairs(env) is None
    text = crash_text("1.0", ["accel", "status"], "ValueError: hunter22\n", env)
    assert "hunter22" not in text


@pytest.mark.parametrize("version", ["true", "1.0"])
def test_version_is_the_integer_1_only(
    ws: Workspace, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    err = refused(ws, capsys, f"version: {version}\n")
    assert f"{ws.config_file}:1: version: expected 1, got " in err


def test_a_cut_short_value_counts_its_characters_not_its_quotes(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(ws, capsys, "launch:\n  rdzv_id: " + "x" * 5000 + "\n")
    assert "... (5000 characters)" in err, err
