"""``checkpoints.persist_every`` with ``snapshot_every``: a rule of two keys, checked on
the configuration all layers make, by every command that checks the configuration, with
the line the launch itself refuses it with."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.cli.main import main
from accel.workspace import Workspace

ALONE = (
    "checkpoints.persist_every needs checkpoints.snapshot_every: set both, or neither "
    "(save_state saves without them)"
)
NOT_A_MULTIPLE = (
    "checkpoints.persist_every (3) must be a multiple of checkpoints.snapshot_every (2): "
    "only snapshots are persisted"
)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("section", "line"),
    [
        ("  persist_every: 3\n", ALONE),
        ("  snapshot_every: 2\n  persist_every: 3\n", NOT_A_MULTIPLE),
    ],
)
def test_every_check_of_the_config_refuses_it_with_one_line(
    ws: Workspace, capsys: pytest.CaptureFixture[str], section: str, line: str
) -> None:
    ws.config_file.write_text(f"version: 1\ncheckpoints:\n{section}")
    Path("train.py").write_text("print('hi')\n")
    for args in (("config", "validate"), ("launch", "--dry-run", "-n", "1", "--cpu", "train.py")):
        assert run(capsys, *args) == (2, "", f"error: {line}\n"), args
    code, out, _ = run(capsys, "env", "--check")
    assert f"problem: config: {line}\n" in out and code != 0
    code, _, err = run(capsys, "status")
    assert code == 0 and f"warning: {line}" in err, err


def test_config_set_refuses_to_make_it_and_changes_nothing(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.config_file.write_text("version: 1\n")
    assert run(capsys, "config", "set", "checkpoints.persist_every", "3") == (
        2,
        "",
        f"error: {ALONE}\n",
    )
    assert run(capsys, "config", "set", "checkpoints.snapshot_every", "2")[0] == 0
    assert run(capsys, "config", "set", "checkpoints.persist_every", "3")[2] == (
        f"error: {NOT_A_MULTIPLE}\n"
    )
    assert run(capsys, "config", "set", "checkpoints.persist_every", "4")[0] == 0
    assert run(capsys, "config", "unset", "checkpoints.snapshot_every")[2] == f"error: {ALONE}\n"
    assert "snapshot_every: 2\n  persist_every: 4\n" in ws.config_file.read_text()


def test_the_layers_meet_in_the_rule(
    ws: Workspace, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.config_file.write_text("version: 1\ncheckpoints:\n  persist_every: 3\n")
    monkeypatch.setenv("ACCEL_CHECKPOINTS_SNAPSHOT_EVERY", "1")
    assert run(capsys, "config", "validate")[0] == 0
    monkeypatch.setenv("ACCEL_CHECKPOINTS_SNAPSHOT_EVERY", "2")
    assert run(capsys, "config", "validate")[2] == f"error: {NOT_A_MULTIPLE}\n"
    # a variable alone breaking the rule is not the file's: an edit of another key goes on
    monkeypatch.delenv("ACCEL_CHECKPOINTS_SNAPSHOT_EVERY")
    ws.config_file.write_text("version: 1\n")
    monkeypatch.setenv("ACCEL_CHECKPOINTS_PERSIST_EVERY", "3")
    assert run(capsys, "config", "set", "logs.level", "debug")[0] == 0
    assert run(capsys, "config", "validate")[2] == f"error: {ALONE}\n"


def test_the_rule_itself() -> None:
    from accel.config.resolve import snapshot_problem

    assert snapshot_problem(None, None) is None
    assert snapshot_problem(2, None) is None
    assert snapshot_problem(2, 4) is None
    assert snapshot_problem(None, 3) == ALONE
    assert snapshot_problem(2, 3) == NOT_A_MULTIPLE
