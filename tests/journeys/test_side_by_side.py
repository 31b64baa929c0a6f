"""Journey: a sweep of six ``accel launch -n 2`` side by side in one project.

A plain torch script never saves into accel's checkpoints, so the six runs share the
default series without taking it: all start their workers, overlap (each rank 0 waits
until all six have started) and succeed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import run_helpers
from accel import Workspace

SCRIPT = Path(__file__).resolve().parent / "scripts" / "sweep_member.py"
RUNS = 6

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_six_launches_side_by_side_in_one_project(ws: Workspace, project: Path) -> None:
    marks = project / "marks"
    marks.mkdir()
    launches = [
        run_helpers.start(project, "launch", "-n", "2", str(SCRIPT), str(marks), str(RUNS))
        for _ in range(RUNS)
    ]
    ends = []
    for launch in launches:
        try:
            _, err = launch.communicate(timeout=480)
        except BaseException:
            for other in launches:
                other.kill()
            raise
        ends.append((launch.returncode, err))
    assert [code for code, _ in ends] == [0] * RUNS, "\n".join(err for _, err in ends)
    assert all("held by" not in err for _, err in ends)
    runs_dir = project / ".accelerate" / "logs" / "runs"
    records = [json.loads((d / "run.json").read_text()) for d in sorted(runs_dir.iterdir())]
    assert len(records) == RUNS
    assert {r["status"] for r in records} == {"succeeded"}
    assert {p.name for p in marks.iterdir()} == {f"started-{r['id']}" for r in records}
