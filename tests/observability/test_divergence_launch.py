"""Divergence with real runs: flagged once per metric, recorded, marked, or stopping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from run_helpers import accel as _accel
from run_helpers import run_json as _record

SCRIPT = str(Path(__file__).parent / "scripts" / "diverge.py")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_diverged_run_is_flagged_once_per_metric_recorded_and_marked(project: Path) -> None:
    done = _accel(project, "launch", SCRIPT)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "became" in line]
    assert warnings == [
        "accel: warning: metric 'loss' became NaN at step 5 on rank 0 (set "
        "logs.on_nonfinite: stop to stop the run when this happens)",
        "accel: warning: metric 'grad_norm' became +inf at step 7 on rank 0 (set "
        "logs.on_nonfinite: stop to stop the run when this happens)",
    ]
    record = _record(project)
    assert record["status"] == "succeeded"
    assert [(n["metric"], n["rank"], n["step"], n["value"]) for n in record["nonfinite"]] == [  # type: ignore[attr-defined]
        ("loss", 0, 5, "nan"),
        ("grad_norm", 0, 7, "inf"),
    ]
    shown = _accel(project, "runs", "show")
    assert "diverged  metric 'loss' became NaN at step 5 on rank 0" in shown.stdout
    assert "succeeded (rank" not in _accel(project, "runs").stdout
    assert "succeeded, diverged" in _accel(project, "runs").stdout
    as_json = json.loads(_accel(project, "runs", "show", "--json").stdout)
    assert as_json["nonfinite"][0]["metric"] == "loss"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_on_nonfinite_stop_ends_the_run_with_exit_1(project: Path) -> None:
    assert _accel(project, "config", "set", "logs.on_nonfinite", "stop").returncode == 0
    stopped = _accel(project, "launch", "--stop-grace-period", "2s", SCRIPT)
    assert stopped.returncode == 1, stopped.stderr
    assert (
        "accel: metric 'loss' became NaN at step 5 on rank 0: stopping the run "
        "(logs.on_nonfinite: stop)" in stopped.stderr
    )
    assert stopped.stderr.rstrip().endswith(
        "metric 'loss' became NaN at step 5 on rank 0 (logs.on_nonfinite: stop)"
    )
    assert "step 39" not in stopped.stdout  # ended long before the script would have
    record = _record(project)
    assert record["status"] == "failed" and record["exit_code"] == 1
    assert record["failed_rank"] == 0 and record["error"]["type"] == "Diverged"  # type: ignore[index]
    assert record["attempts"][-1]["stop_reason"] == "diverged"  # type: ignore[index]
