"""logs/training.log: line format, redaction, rotation, several writers, never failing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accel.training_log import format_line, log_paths
from accel.workspace import Workspace


def make_ws(project: Path, max_bytes: int = 1000, backups: int = 2) -> Workspace:
    ws = Workspace(project / ".accelerate").ensure()
    ws.config_file.write_text(
        f"logs:\n  rotate_max_bytes: {max_bytes}\n  backup_count: {backups}\n"
    )
    return Workspace(ws.path)


def test_a_line_has_time_level_pid_command_and_redacted_message() -> None:
    line = format_line(
        "pushed with HF_TOKEN=abc123", "warning", command="accel launch", now=0.0, pid=42
    )
    assert (
        line
        == "1970-01-01T00:00:00.000+00:00 WARNING pid=42 accel launch: pushed with HF_TOKEN=***\n"
    )


def test_multi_line_messages_stay_on_one_line() -> None:
    assert format_line("a\nb\tc", "info", command="x", now=0.0, pid=1).endswith("x: a b c\n")


def test_a_log_line_appends_and_respects_the_level(project: Path) -> None:
    ws = make_ws(project)
    assert ws.log("first", command="accel clean")
    assert not ws.log("noise", level="debug")
    lines = (ws.logs_dir / "training.log").read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith("accel clean: first")


def test_rotation_keeps_backup_count_files(project: Path) -> None:
    ws = make_ws(project, max_bytes=300, backups=2)
    for i in range(40):
        assert ws.log(f"event {i:03d} " + "x" * 40, command="t")
    paths = [p for p in log_paths(ws.logs_dir, 5) if p.exists()]
    assert [p.name for p in paths] == ["training.log", "training.log.1", "training.log.2"]
    assert all(p.stat().st_size <= 300 for p in paths)
    text = "".join(p.read_text() for p in reversed(paths))
    assert text.rstrip().endswith("event 039 " + "x" * 40)
    numbers = [int(line.split("event ")[1][:3]) for line in text.splitlines()]
    assert numbers == sorted(numbers) == list(range(numbers[0], 40))


def test_backup_count_zero_starts_over(project: Path) -> None:
    ws = make_ws(project, max_bytes=200, backups=0)
    for i in range(10):
        ws.log(f"event {i} " + "y" * 50, command="t")
    assert [p.name for p in ws.logs_dir.iterdir() if p.name.startswith("training")] == [
        "training.log"
    ]
    assert (ws.logs_dir / "training.log").stat().st_size <= 200


def test_logging_never_creates_a_workspace_or_raises(project: Path) -> None:
    ws = Workspace(project / ".accelerate")
    assert ws.log("hello") is False
    assert not ws.path.exists()
    ws.ensure()
    (ws.logs_dir / "training.log").mkdir(parents=True)  # something in the way
    assert ws.log("hello") is False


def test_an_invalid_config_still_gets_logged_with_defaults(project: Path) -> None:
    ws = make_ws(project)
    ws.config_file.write_text("logs:\n  nope: 1\n")
    assert Workspace(ws.path).log("still here")


WRITER = textwrap.dedent(
    """
    import sys
    from accel.workspace import Workspace
    ws = Workspace(sys.argv[1])
    for i in range(150):
        assert ws.log(f"writer {sys.argv[2]} line {i:04d} " + "z" * 30, command="w")
    """
)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_several_processes_append_and_rotate_without_losing_or_tearing_lines(
    project: Path,
) -> None:
    ws = make_ws(project, max_bytes=4000, backups=50)
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(ws.path), str(n)]) for n in range(4)
    ]
    assert [p.wait(timeout=80) for p in procs] == [0, 0, 0, 0]
    lines = [
        line
        for p in log_paths(ws.logs_dir, 50)
        if p.exists()
        for line in p.read_text().splitlines()
    ]
    assert len(lines) == 600
    assert all(line.endswith("z" * 30) and " w: writer " in line for line in lines)
    for n in range(4):
        mine = sorted(line.split(" line ")[1][:4] for line in lines if f"writer {n} " in line)
        assert mine == [f"{i:04d}" for i in range(150)]
