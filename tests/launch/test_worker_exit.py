"""How workers end: accel destroys the group it started, and tolerates torch's teardown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launchutil import SCRIPTS, assert_no_orphans, pid_alive, run_json

from run_helpers import Accel


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_that_never_calls_end_ends_its_group(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    script = str(SCRIPTS / "acc_no_end.py")
    runs = [("launch", "-n", "2", script, str(out))] * 4
    runs.append(("launch", "-n", "2", "--max-restarts", "1", script, str(out), "crash"))
    for args in runs:
        done = accel(*args, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "terminate called" not in done.stderr
        # Destroyed before the script's own (earlier registered) exit handler ran.
        seen = {p.name: p.read_text() for p in out.iterdir()}
        assert seen and set(seen.values()) == {"False"}, seen
        for p in out.iterdir():
            p.unlink()
    records = json.loads(accel("runs", "--json").stdout)
    assert [r["status"] for r in records] == ["succeeded"] * 5
    assert max(r["restarts"] for r in records) == 1
    for record in records:
        assert_no_orphans(record["id"])


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("mode", "flags", "said"),
    [
        ("abort", (), "rank 1 finished; died of SIGABRT in teardown"),
        ("segv", (), "rank 1 finished; died of SIGSEGV in teardown"),
        ("hang", (), "rank 1 finished; hung in teardown, ended after 5 s"),
        ("hang", ("--preload",), "rank 1 finished; hung in teardown, ended after 5 s"),
        ("handler", (), "rank 1 finished; hung in teardown, ended after 7 s"),
    ],
)
def test_a_rank_that_finished_and_then_hangs_or_dies_in_teardown_has_finished(
    accel: Accel, project: Path, mode: str, flags: tuple[str, ...], said: str
) -> None:
    out = project / "out"
    out.mkdir()
    script = str(SCRIPTS / "teardown.py")
    done = accel(
        "launch",
        "-n",
        "2",
        *flags,
        "--stop-grace-period",
        "2s",
        script,
        str(out),
        mode,
        timeout=100,  # bounded: before, a rank hung in teardown hung the run forever
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "rank-1.returned").read_text() == mode
    assert f"accel: {said}" in done.stderr + done.stdout
    pid = int((out / "rank-1.pid").read_text())
    assert not pid_alive(pid)
    record = run_json(project)
    assert record["status"] == "succeeded" and record["exit_code"] == 0, record
    (ended,) = record["teardown"]
    assert ended["rank"] == 1 and ended["code"] == 0 and ended["message"] == said
    assert ended["what"] == ("hung" if mode in ("hang", "handler") else "ended")
    shown = accel("runs", "show", record["id"])
    assert f"teardown  {said}" in shown.stdout
    assert_no_orphans(record["id"])
