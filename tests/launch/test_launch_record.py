"""Run records and failure reports: pure functions."""

from __future__ import annotations

import signal

import pytest

from accel.launch.record import RankFailure, explain_exit, finished_record, first_failure


def failure(rank: int, code: int, t: float, kind: str | None = None) -> RankFailure:
    return RankFailure(
        rank=rank,
        local_rank=rank,
        pid=100 + rank,
        exitcode=code,
        attempt=0,
        timestamp=t,
        type=kind,
        message="m" if kind else None,
        traceback="Traceback...\nValueError: m" if kind else None,
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


def test_exception_beats_signal_beats_terminated() -> None:
    terminated = failure(0, -signal.SIGTERM, 1.0)
    killed = failure(1, -signal.SIGKILL, 2.0)
    raised = failure(2, 1, 3.0, "ValueError")
    assert first_failure([terminated, killed, raised]) == raised
    assert first_failure([terminated, killed]) == killed
    assert first_failure([]) is None
    assert first_failure([failure(3, 1, 5.0), failure(1, 1, 5.0)]).rank == 1  # type: ignore[union-attr]


def test_finished_record_names_root_and_collateral() -> None:
    root = failure(1, 1, 1.0, "ValueError")
    done = finished_record(
        {"id": "x"}, status="failed", exit_code=1, ended_at="t", failures=[root], ranks=[0, 1, 2]
    )
    assert done["failed_rank"] == 1 and done["collateral_ranks"] == [0, 2]
    assert done["error"]["type"] == "ValueError" and "explanation" in done["error"]
    ok = finished_record({"id": "x"}, status="succeeded", exit_code=0, ended_at="t", ranks=[0])
    assert ok["failed_rank"] is None and ok["error"] is None and ok["collateral_ranks"] == []
