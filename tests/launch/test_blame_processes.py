"""Blame by cause with real processes: rank 1 dies (or hangs) while rank 0 waits in a
collective; every report (console, run.json, `runs show`, restart message) names rank 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, assert_no_orphans, run_json, wait_for

Accel = Callable[..., subprocess.CompletedProcess[str]]
StartAccel = Callable[..., subprocess.Popen[str]]
SCRIPT = str(SCRIPTS / "blame_patterns.py")


@pytest.fixture
def out(project: Path) -> Path:
    folder = project / "out"
    folder.mkdir()
    return folder


def _shown_ranks(accel: Accel) -> dict[int, dict[str, Any]]:
    shown = accel("runs", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    return {r["rank"]: r for r in json.loads(shown.stdout)["ranks"]}


def _fates(record: dict[str, Any], attempt: int = -1) -> dict[int, str]:
    return {f["rank"]: f["fate"] for f in record["attempts"][attempt]["failures"]}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_of_rank_1_blames_rank_1_not_the_rank_in_the_barrier(
    start_accel: StartAccel, accel: Accel, out: Path
) -> None:
    proc = start_accel("launch", "-n", "2", SCRIPT, str(out), "kill")
    wait_for(lambda: (out / "in-barrier-0").exists() and (out / "pid-1").exists(), 60, "ranks")
    os.kill(int((out / "pid-1").read_text()), signal.SIGKILL)  # what the OOM killer does
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    assert "error: rank 1 failed first: killed (SIGKILL)" in stderr
    assert "rank 0 failed first" not in stderr and "collateral" not in stderr
    record = run_json(out.parent)
    assert record["failed_rank"] == 1 and record["error"]["exitcode"] == -9
    assert _fates(record)[1] == "failed" and _fates(record)[0] in ("also failed", "stopped")
    assert 0 in record["also_failed_ranks"] + record["stopped_ranks"]
    ranks = _shown_ranks(accel)
    assert ranks[1]["status"] == "failed" and ranks[0]["status"] in ("also failed", "stopped")
    assert "rank 1 failed first" in accel("runs", "show").stdout
    assert_no_orphans(record["id"])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_segfault_is_blamed_over_the_error_it_caused_and_explains_the_restart(
    accel: Accel, out: Path
) -> None:
    done = accel("launch", "-n", "2", "--max-restarts", "1", SCRIPT, str(out), "segv")
    assert done.returncode == 0, done.stderr
    assert "accel: rank 1 failed (segmentation fault (SIGSEGV)" in done.stderr
    assert "restarting the workers (restart 1 of 1)" in done.stderr
    record = run_json(out.parent)
    assert record["status"] == "succeeded" and record["restarts"] == 1
    first = {f["rank"]: f for f in record["attempts"][0]["failures"]}
    assert first[1]["fate"] == "failed" and first[1]["exitcode"] == -11
    assert "Segmentation fault" in first[1]["traceback"]  # faulthandler's dump, kept
    assert "string_at" in first[1]["traceback"]
    shown = json.loads(accel("runs", "show", "--json").stdout)
    reason = shown["restart_reasons"][0]
    assert reason["attempt"] == 0 and reason["reason"].startswith("rank 1 failed first: seg")
    assert "restarted after attempt 0: rank 1 failed first" in accel("runs", "show").stdout


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_python_exception_is_failed_and_the_peers_error_also_failed(
    accel: Accel, out: Path
) -> None:
    done = accel("launch", "-n", "2", SCRIPT, str(out), "raise")
    assert done.returncode == 1
    assert "error: rank 1 failed first: ValueError: bad batch on rank 1" in done.stderr
    record = run_json(out.parent)
    assert record["failed_rank"] == 1 and record["error"]["type"] == "ValueError"
    fates = _fates(record)
    assert fates[1] == "failed" and fates[0] in ("also failed", "stopped")
    if fates[0] == "also failed":  # rank 0 got "Connection closed by peer" first
        assert "accel: rank 0 also failed, after rank 1: RuntimeError" in done.stderr
        assert record["also_failed_ranks"] == [0]
    else:
        assert "rank(s) 0 were stopped by accel after rank 1 failed" in done.stderr
    assert "collateral" not in done.stderr + json.dumps(record)
    ranks = _shown_ranks(accel)
    assert ranks[1]["status"] == "failed" and ranks[1]["detail"].startswith("ValueError")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_hang_names_the_rank_in_sleep_not_the_rank_in_the_barrier(
    accel: Accel, out: Path
) -> None:
    done = accel(
        "launch",
        "-n",
        "2",
        "--hang-timeout",
        "6s",
        "--hang-action",
        "kill",
        SCRIPT,
        str(out),
        "hang",
    )
    assert done.returncode == 1
    assert (
        "rank 1 is stuck in stuck_in_sleep (blame_patterns.py), not in a collective; "
        "rank(s) 0 waited for it" in done.stderr
    )
    assert "out of memory" not in done.stderr
    (detected,) = [line for line in done.stderr.splitlines() if "looks hung" in line]
    assert detected.endswith(
        "; rank 1 is stuck in stuck_in_sleep (blame_patterns.py), not in a collective"
    )
    record = run_json(out.parent)
    assert record["status"] == "hung" and record["failed_rank"] == 1
    assert record["hangs"][0]["stuck"] == [1]
    assert record["stuck_ranks"] == [1] and record["stopped_ranks"] == [0]
    fates = {f["rank"]: f for f in record["attempts"][-1]["failures"]}
    assert fates[0]["explanation"] == "stopped by accel (SIGKILL) after the hang"
    assert "OOM" not in json.dumps(record)
    ranks = _shown_ranks(accel)
    assert ranks[1]["status"] == "stuck" and ranks[0]["status"] == "stopped"


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("how", "restarts", "why"),
    [
        ("text", 0, "SystemExit: fatal: config missing (token ***)"),
        ("code", 2, "exited with code 7"),
    ],
)
def test_a_rank_that_exited_non_zero_before_the_stop_also_failed(
    accel: Accel, out: Path, how: str, restarts: int, why: str
) -> None:
    """Rank 1 exited by itself before accel stopped it, and was still in its exit handlers
    when accel's SIGTERM came: it also failed, and that SIGTERM is no death in teardown."""
    script = str(SCRIPTS / "exit_together.py")
    token = "s3cr3t-demo-value"
    done = accel(
        "launch", "-n", "2", "--stop-grace-period", "30s", "--max-restarts", str(restarts),
        script, str(out), how,
        env={"DEMO_API_TOKEN": token}, timeout=150,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    code = 7 if how == "code" else 1
    assert f"error: rank 0 failed first: {why}" in done.stderr
    if how == "text":
        assert f"{why} (exited with code 1); its log:" in done.stderr
    assert f"accel: rank 1 also failed, after rank 0: {why.partition(' (')[0]}" in done.stderr
    restarted = f"accel: rank 0 failed (exited with code {code}); restarting the workers"
    assert done.stderr.count(restarted) == restarts
    assert "in teardown" not in done.stderr and "stopped by accel" not in done.stderr
    assert token not in done.stdout + done.stderr
    record = run_json(out.parent)
    assert record["failed_rank"] == 0 and record["also_failed_ranks"] == [1]
    assert record["stopped_ranks"] == [] and not record.get("teardown")
    for attempt in record["attempts"]:
        ends = {f["rank"]: f for f in attempt["failures"]}
        assert {r: f["fate"] for r, f in ends.items()} == {0: "failed", 1: "also failed"}
        assert ends[1]["exitcode"] == code and ends[1]["died_at"] > attempt["stopped_at"]
        assert ends[1]["raised_at"] < attempt["stopped_at"]
    assert token not in json.dumps(record)
    assert_no_orphans(record["id"])
