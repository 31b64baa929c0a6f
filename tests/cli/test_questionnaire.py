"""The interactive `accel config` on a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest


def _read_until(fd: int, needle: bytes, deadline: float) -> bytes:
    seen = b""
    while needle not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {needle!r} in {seen!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return seen


@pytest.mark.timeout(60)
def test_questionnaire_on_a_terminal_writes_the_answers(
    project: Path, accel_exe: list[str]
) -> None:
    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen(
        [*accel_exe, "config"],
        stdin=sub_fd,
        stdout=sub_fd,
        stderr=sub_fd,
        env={**os.environ, "TERM": "dumb", "COLUMNS": "120"},
    )
    os.close(sub_fd)
    deadline = time.monotonic() + 50
    answers = [
        (b"processes", b"3"),
        (b"machines", b"1"),
        (b"CPU only", b"maybe"),
        (b"true or false", b"true"),
        (b"precision", b""),
        (b"keep", b"5"),
    ]
    try:
        for prompt, answer in answers:
            _read_until(main_fd, prompt, deadline)
            os.write(main_fd, answer + b"\r")
        _read_until(main_fd, b"wrote", deadline)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        os.close(main_fd)
    text = (project / ".accelerate" / "config" / "accelerate_config.yaml").read_text()
    assert "num_processes: 3" in text and "use_cpu: true" in text and "keep_last: 5" in text
    assert "mixed_precision: 'no'" in text
