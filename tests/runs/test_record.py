"""accel.runs: records, liveness through the run lock, crashed runs, id resolution."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest

from accel import runs
from accel.errors import UsageError
from accel.workspace import Workspace


def _write(ws: Workspace, run_id: str, **fields: object) -> None:
    folder = runs.run_dir(ws.layout, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"id": run_id, **fields}))


def test_new_run_id_sorts_by_time() -> None:
    a = runs.new_run_id(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "aaaaaa")
    b = runs.new_run_id(datetime(2026, 1, 2, 3, 4, 6, tzinfo=timezone.utc), "000000")
    assert a == "20260102-030405-aaaaaa" and a < b


def test_runs_started_within_one_second_sort_in_the_order_they_started(ws: Workspace) -> None:
    # A sweep of short runs: `latest` must be the last one started, not a random one of
    # the second's (the suffix was all random).
    second = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    starts = [second.replace(microsecond=ms * 1000) for ms in range(0, 1000, 7)]
    ids = [runs.new_run_id(start) for start in starts]
    assert sorted(ids) == ids and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"20260102-030405-[0-9a-f]{6}", run_id) for run_id in ids)
    for run_id in ids[:3]:
        _write(ws, run_id, status="succeeded", exit_code=0)
    assert runs.resolve_run_id(ws.layout, "latest") == ids[2]


def test_records_newest_first_and_crashed_when_no_launcher(ws: Workspace) -> None:
    _write(ws, "20260101-000000-aaaaaa", status="succeeded", exit_code=0)
    _write(ws, "20260102-000000-bbbbbb", status="running", started_at="2026-01-02T00:00:00+00:00")
    found = runs.list_runs(ws.layout)
    assert [r.id for r in found] == ["20260102-000000-bbbbbb", "20260101-000000-aaaaaa"]
    assert found[0].status == runs.RunStatus.CRASHED and not found[0].live
    assert found[1].status == runs.RunStatus.SUCCEEDED and found[1].exit_code == 0
    assert runs.live_run_ids(ws.layout) == set()


def test_live_while_lock_held_even_in_same_process(ws: Workspace) -> None:
    _write(ws, "r1", status="running", started_at="2026-01-02T00:00:00+00:00")
    with runs.run_lock(ws.layout, "r1"):
        assert runs.is_live(ws.layout, "r1")
        assert runs.live_run_ids(ws.layout) == {"r1"}
        record = runs.read_run(ws.layout, "r1")
        assert record.status == runs.RunStatus.RUNNING and record.duration is not None
    assert not runs.is_live(ws.layout, "r1")


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_lock_released_when_holder_is_sigkilled(ws: Workspace) -> None:
    code = (
        "import sys, time; from accel import runs; from accel.workspace import Workspace\n"
        "ws = Workspace(sys.argv[1])\n"
        "with runs.run_lock(ws.layout, 'r2'):\n"
        "    print('held', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(ws.path)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        assert runs.is_live(ws.layout, "r2")
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while runs.is_live(ws.layout, "r2") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not runs.is_live(ws.layout, "r2")


def test_is_live_never_creates_lock_files(ws: Workspace) -> None:
    assert not runs.is_live(ws.layout, "nope")
    assert not runs.run_lock_path(ws.layout, "nope").exists()


def test_resolve_run_id(ws: Workspace) -> None:
    with pytest.raises(UsageError, match="no runs"):
        runs.resolve_run_id(ws.layout, None)
    _write(ws, "20260101-000000-aaaaaa")
    _write(ws, "20260102-000000-bbbbbb")
    assert runs.resolve_run_id(ws.layout, "latest") == "20260102-000000-bbbbbb"
    assert runs.resolve_run_id(ws.layout, "aaaaaa") == "20260101-000000-aaaaaa"
    assert runs.resolve_run_id(ws.layout, "20260101") == "20260101-000000-aaaaaa"
    with pytest.raises(UsageError, match="ambiguous: it matches 2 runs"):
        runs.resolve_run_id(ws.layout, "2026")


def test_a_run_is_named_by_any_unique_part_of_its_id(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs.md: ``accel logs 151347 --rank 1``, the time part of the id."""
    for run_id in ("20261129-151347-3fa2c1", "20261129-160210-9b01de", "20261130-151347-77aa00"):
        _write(ws, run_id, status="succeeded", exit_code=0)
    (runs.run_dir(ws.layout, "20261129-151347-3fa2c1") / "rank-1.log").write_text("step 3\n")
    assert runs.resolve_run_id(ws.layout, "29-151347") == "20261129-151347-3fa2c1"
    assert runs.resolve_run_id(ws.layout, "1602") == "20261129-160210-9b01de"
    with pytest.raises(UsageError) as refused:
        runs.resolve_run_id(ws.layout, "151347")
    assert str(refused.value) == (
        "run '151347' is ambiguous: it matches 2 runs "
        "(20261130-151347-77aa00, 20261129-151347-3fa2c1); give more of the id"
    )
    assert runs.resolve_run_id(ws.layout, "de") == "20261129-160210-9b01de"  # a short end
    with pytest.raises(UsageError, match="unknown run '151'"):
        runs.resolve_run_id(ws.layout, "151")  # 3 characters inside: too short to guess
    _rm = runs.run_dir(ws.layout, "20261130-151347-77aa00")
    (_rm / "run.json").unlink()
    _rm.rmdir()
    from accel.cli.main import main

    assert main(["logs", "151347", "--rank", "1", "--no-prefix"]) == 0
    assert capsys.readouterr().out.startswith("step 3\n")


def test_unreadable_record_is_still_listed(ws: Workspace) -> None:
    folder = runs.run_dir(ws.layout, "broken")
    folder.mkdir(parents=True)
    (folder / "run.json").write_text("{not json")
    (folder / "rank-1.log").write_text("x")
    (folder / "rank-0.log").write_text("y")
    record = runs.read_run(ws.layout, "broken")
    # Nothing says it crashed: its record is damaged, and the reason is kept to report.
    assert record.status == "unreadable" and "run.json is not valid JSON" in str(record.problem)
    assert list(record.rank_logs()) == [0, 1]
