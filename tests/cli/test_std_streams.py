"""A command started with a standard stream closed, or with a strict output encoding,
runs as with /dev/null there: no crash, no crash log, the usual exit code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from accel.crashlog import CRASH_LOG_PREFIX
from accel.workspace import Workspace


def _run(
    accel_exe: list[str], redirect: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``accel ARGS`` with ``redirect`` (``<&-``: stdin closed) applied by the shell."""
    return subprocess.run(
        ["bash", "-c", f'exec "$@" {redirect}', "bash", *accel_exe, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_closed_stdin_is_no_terminal(ws: Workspace, accel_exe: list[str]) -> None:
    # sys.stdin was None: 'unexpected AttributeError ... isatty' and a crash log
    ws.cache.put("tokenizer/vocab", b"x")
    done = _run(accel_exe, "<&-", "cache", "rm", "tokenizer/vocab")
    assert done.returncode == 2, done.stderr
    assert "not a terminal" in done.stderr and "unexpected" not in done.stderr
    assert ws.cache.get("tokenizer/vocab") == b"x"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [("status",), ("status", "--json"), ("runs",)])
def test_a_closed_stdout_is_no_crash(
    ws: Workspace, accel_exe: list[str], args: tuple[str, ...]
) -> None:
    done = _run(accel_exe, ">&-", *args)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not list(ws.logs_dir.glob(f"{CRASH_LOG_PREFIX}*"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_name_that_is_not_utf8_prints_escaped_under_a_strict_encoding(
    ws: Workspace, accel_exe: list[str], project: Path
) -> None:
    (ws.checkpoints_dir).mkdir(parents=True, exist_ok=True)
    (ws.checkpoints_dir / os.fsdecode(b"bad-\xff.bin")).write_bytes(b"x")
    done = _run(accel_exe, "", "status", PYTHONIOENCODING="utf-8:strict")
    assert done.returncode == 0, done.stderr
    assert "bad-\\udcff.bin" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [("status",), ("status", "--json"), ("config", "schema")])
def test_a_reader_that_goes_away_is_no_failure(
    ws: Workspace, accel_exe: list[str], args: tuple[str, ...]
) -> None:
    # `--json | true` exited 1 where the text form exited 0
    done = subprocess.run(
        ["bash", "-c", '"$@" | true; exit "${PIPESTATUS[0]}"', "bash", *accel_exe, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [("status",), ("status", "--json"), ("runs",), ("env",)])
def test_an_output_on_a_full_disk_is_said_about_the_output(
    ws: Workspace, accel_exe: list[str], args: tuple[str, ...]
) -> None:
    # `> /dev/full` said "the disk is full: free space (`accel clean`)", about the workspace
    done = _run(accel_exe, ">/dev/full", *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        "error: could not write the output: No space left on device; free space where it "
        "goes, or send it elsewhere\n"
    )
    assert not list(ws.logs_dir.glob(f"{CRASH_LOG_PREFIX}*"))
