"""accel.launch.observe: how the launcher records hangs and resources (no processes)."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path
from typing import Any

from accel.hang import HangEvent, HangVerdict
from accel.launch.observe import RunObserver, gpu_indices
from accel.runs.failures import BY_HANG


def _plan(tmp_path: Path, action: str = "kill", **env: str) -> Any:
    """A plan as the observer reads it: the typed settings (the defaults but these)."""
    from accel.config.resolve import resolve

    defaults = resolve(project=None, user=None, env={}).settings
    settings = dataclasses.replace(
        defaults,
        launch=dataclasses.replace(defaults.launch, hang_timeout=5.0, hang_action=action),
        logs=dataclasses.replace(defaults.logs, resource_interval=10.0),
    )
    return types.SimpleNamespace(run_id="r1", run_dir=tmp_path, settings=settings, worker_env=env)


def _event() -> HangEvent:
    verdict = HangVerdict(idle=6.0, timeout=5.0, last_activity=94.0, quiet={0: 6.0, 1: 9.0})
    return HangEvent(verdict=verdict, stacks={0: "File x, in a", 1: "File y, in stuck"}, at=100.0)


def test_gpu_indices_follow_cpu_mode_and_visible_devices(tmp_path: Path) -> None:
    assert gpu_indices(_plan(tmp_path, ACCELERATE_USE_CPU="true")) == ()
    assert gpu_indices(_plan(tmp_path, CUDA_VISIBLE_DEVICES="2,3")) == [2, 3]
    assert gpu_indices(_plan(tmp_path, CUDA_VISIBLE_DEVICES="GPU-abc")) is None


def test_a_hang_is_shown_recorded_and_labels_the_killed_attempt(tmp_path: Path) -> None:
    said: list[str] = []
    observer = RunObserver(_plan(tmp_path), dict, dict, said.append)
    observer.attempt_started(0, {0: 2**22 + 1, 1: 2**22 + 2})
    assert json.loads((tmp_path / "workers.json").read_text())["pids"] == {
        "0": 2**22 + 1,
        "1": 2**22 + 2,
    }
    assert observer.tick({"status": "running"}) is None
    observer._queue(_event())
    record = observer.tick({"status": "running"})
    assert record is not None and record["status"] == "hung"
    assert record["hangs"][0]["action"] == "kill" and record["hangs"][0]["quiet"] == {
        "0": 6.0,
        "1": 9.0,
    }
    assert "[rank1] File y, in stuck" in said and any("looks hung" in line for line in said)
    found = observer.hang_stop(0)
    assert found is not None
    stop, clue = found
    assert stop.reason == BY_HANG and stop.at >= 100.0
    assert clue.stacks[1] == "File y, in stuck" and clue.quiet == {0: 6.0, 1: 9.0}
    assert observer.hang_stop(1) is None  # attempt 1 was not stopped by a hang
    final, status = observer.finish({"status": "running"}, "failed")
    assert status == "hung" and final["resources"]["samples"] == 0 and final["hangs"]


def test_warn_keeps_the_run_going_and_a_later_success_stays_a_success(tmp_path: Path) -> None:
    said: list[str] = []
    observer = RunObserver(_plan(tmp_path, action="warn"), dict, dict, said.append)
    observer._queue(_event())
    assert observer.tick({})["hangs"][0]["action"] == "warn"  # type: ignore[index]
    assert observer.killed == {}
    final, status = observer.finish({}, "succeeded")
    assert status == "succeeded" and final["hangs"][0]["action"] == "warn"
