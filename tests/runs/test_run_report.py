"""Run records and failure reports: pure functions."""

from __future__ import annotations

import signal

import pytest

from accel.launch.blame import blame
from accel.runs.failures import RankFailure, Stop
from accel.runs.report import explain_exit, finished_record, with_attempt, with_failures


def failure(rank: int, code: int, died: float, kind: str | None = None) -> RankFailure:
    return RankFailure(
        rank=rank,
        local_rank=rank,
        pid=100 + rank,
        exitcode=code,
        attempt=0,
        timestamp=died,
        type=kind,
        message="m" if kind else None,
        traceback="Traceback...\nValueError: m" if kind else None,
        raised_at=died - 0.01 if kind else None,
        died_at=died,
    )


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exited normally"),
        (1, "exited with code 1"),
        (-signal.SIGKILL, "out of memory"),
        (-signal.SIGABRT, "aborted"),
        (-signal.SIGSEGV, "segmentation fault"),
        (137, "code 137 (killed (SIGKILL)"),
        (None, "did not exit"),
    ],
)
def test_explain_exit(code: int | None, text: str) -> None:
    assert text in explain_exit(code)


def test_finished_record_names_the_failing_the_also_failed_and_the_stopped() -> None:
    verdict = blame(
        [failure(0, -15, 5.0), failure(1, 1, 1.0, "ValueError"), failure(2, 1, 2.0, "OSError")],
        Stop(3.0),
    )
    record = with_attempt({"id": "x"}, 0, "t0")
    record = with_failures(record, 0, verdict, Stop(3.0))
    done = finished_record(record, status="failed", exit_code=1, ended_at="t", verdict=verdict)
    assert done["failed_rank"] == 1 and done["error"]["type"] == "ValueError"
    assert done["also_failed_ranks"] == [2] and done["stopped_ranks"] == [0]
    assert done["stuck_ranks"] == [] and "collateral_ranks" not in done
    entry = done["attempts"][0]
    assert entry["stopped_at"] == 3.0 and entry["stop_reason"] == "failure"
    fates = {f["rank"]: f["fate"] for f in entry["failures"]}
    assert fates == {0: "stopped", 1: "failed", 2: "also failed"}
    assert entry["failures"][0]["explanation"] == "stopped by accel (SIGTERM) after rank 1 failed"
    ok = finished_record({"id": "x"}, status="succeeded", exit_code=0, ended_at="t")
    assert ok["failed_rank"] is None and ok["error"] is None and ok["stopped_ranks"] == []
