"""The interactive `accel config` on a real pseudo-terminal: it edits, never wipes."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
EXISTING = """\
# my settings: keep this comment
version: 1

launch:
  num_processes: 2   # two workers on my laptop
  stop_grace_period: 30s
  env:
    WANDB_MODE: offline

logs:
  level: debug
"""


def _read_until(fd: int, needle: bytes, deadline: float) -> bytes:
    seen = b""
    while needle not in ANSI.sub(b"", seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {needle!r} in {seen!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return ANSI.sub(b"", seen)


def _converse(
    accel_exe: list[str], answers: list[tuple[bytes, bytes]], last: bytes, **env: str
) -> str:
    """Answer each prompt in turn; everything the terminal showed, up to ``last``."""
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen(
        [*accel_exe, "config"],
        stdin=sub_fd,
        stdout=sub_fd,
        stderr=sub_fd,
        env={**os.environ, "TERM": "dumb", "COLUMNS": "200", **env},
    )
    os.close(sub_fd)
    deadline = time.monotonic() + 50
    shown = b""
    try:
        for prompt, answer in answers:
            shown += _read_until(main_fd, prompt, deadline)
            os.write(main_fd, answer + b"\r")
        shown += _read_until(main_fd, last, deadline)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        os.close(main_fd)
    return shown.decode(errors="replace")


QUESTIONS = [b"processes", b"machines", b"CPU only", b"precision", b"keep"]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_new_file_gets_the_answers_after_a_look_at_them(
    project: Path, accel_exe: list[str]
) -> None:
    answers = [
        (b"processes", b"3"),
        (b"machines", b"1"),
        (b"CPU only", b"maybe"),
        (b"true or false", b"true"),
        (b"precision", b""),
        (b"keep", b"5"),
        (b"Write", b"y"),
    ]
    shown = _converse(accel_exe, answers, b"wrote")
    assert "+  num_processes: 3" in shown
    text = (project / ".accelerate" / "config" / "accelerate_config.yaml").read_text()
    assert "num_processes: 3" in text and "use_cpu: true" in text and "keep_last: 5" in text
    assert "mixed_precision: 'no'" in text


@pytest.fixture
def existing(project: Path) -> Path:
    path = project / ".accelerate" / "config" / "accelerate_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(EXISTING)
    return path


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_enter_everywhere_keeps_the_file_exactly(existing: Path, accel_exe: list[str]) -> None:
    shown = _converse(accel_exe, [(q, b"") for q in QUESTIONS], b"left as it is")
    assert "(2)" in shown  # the current value is the default, not the built-in 1
    assert existing.read_text() == EXISTING


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_one_change_is_one_line_of_diff_and_the_rest_survives(
    existing: Path, accel_exe: list[str]
) -> None:
    answers = [(b"processes", b"4"), *((q, b"") for q in QUESTIONS[1:]), (b"Write", b"y")]
    shown = _converse(accel_exe, answers, b"wrote")
    changed = [ln for ln in shown.splitlines() if re.match(r"^[+-]  ", ln)]
    assert changed == [
        "-  num_processes: 2   # two workers on my laptop",
        "+  num_processes: 4   # two workers on my laptop",
    ]
    assert existing.read_text() == EXISTING.replace("num_processes: 2", "num_processes: 4")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_saying_no_writes_nothing(existing: Path, accel_exe: list[str]) -> None:
    answers = [(b"processes", b"8"), *((q, b"") for q in QUESTIONS[1:]), (b"Write", b"n")]
    _converse(accel_exe, answers, b"nothing written")
    assert existing.read_text() == EXISTING


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_variable_of_this_shell_is_named_not_written_into_the_file(
    project: Path, accel_exe: list[str]
) -> None:
    # Enter everywhere wrote num_processes: 8 from the variable into the file git tracks
    answers = [*((q, b"") for q in QUESTIONS), (b"Write", b"y")]
    shown = _converse(accel_exe, answers, b"wrote", ACCEL_LAUNCH_NUM_PROCESSES="8")
    assert "note: env (ACCEL_LAUNCH_NUM_PROCESSES) sets launch.num_processes for you" in shown
    text = (project / ".accelerate" / "config" / "accelerate_config.yaml").read_text()
    assert "num_processes: 1" in text and "8" not in text
