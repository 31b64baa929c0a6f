"""Blame agrees with the stacks when only rank 0 prints and waits in accel's collectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launchutil import SCRIPTS, assert_no_orphans, run_folder, run_json

from accel.launch.blame import in_collective
from run_helpers import Accel


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize(("mode", "waits_in"), [("barrier", "barrier"), ("save", "_wait")])
def test_the_rank_that_never_printed_and_sleeps_is_stuck_not_the_waiting_rank_0(
    accel: Accel, project: Path, mode: str, waits_in: str
) -> None:
    out = project / "out"
    out.mkdir()
    done = accel(
        "launch",
        "-n",
        "2",
        "--hang-timeout",
        "6s",
        "--hang-action",
        "kill",
        str(SCRIPTS / "blame_quiet.py"),
        str(out),
        mode,
        env={"ACCEL_CHECKPOINTS_ARRIVAL_TIMEOUT": "10m"},  # the hang watch sees it first
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rank 0: training done" in done.stdout  # rank 0 printed; rank 1 never did
    said = "rank 1 is stuck in stuck_in_sleep (blame_quiet.py), not in a collective"
    assert said in done.stderr, done.stderr
    record = run_json(project)
    assert record["stuck_ranks"] == [1] and record["failed_rank"] == 1
    (hang,) = record["hangs"]
    assert hang["stuck"] == [1] and set(hang["quiet"]) == {"0", "1"}
    assert hang["quiet"]["1"] >= hang["quiet"]["0"]  # quiet since its start
    # The verdict is the stacks' own: rank 0 waits in accel's collective, rank 1 does not.
    stacks = {r: (run_folder(project) / "stacks" / f"rank-{r}.txt").read_text() for r in (0, 1)}
    assert f" in {waits_in}" in stacks[0] and "stuck_in_sleep" in stacks[1]
    outside = [r for r, s in stacks.items() if not in_collective(s)]
    assert outside == record["stuck_ranks"]
    shown = json.loads(accel("runs", "show", "--json").stdout)
    assert {r["rank"]: r["status"] for r in shown["ranks"]} == {0: "stopped", 1: "stuck"}
    assert_no_orphans(record["id"])
