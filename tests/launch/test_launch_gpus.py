"""`accel launch` refuses more workers than visible GPUs, before it starts anything.

The GPU count is the one thing a CPU machine cannot provide: it is injected at the
planning edge (``accel.launch.prepare._gpu_count``); the rule itself is
:func:`accel.devices.gpu_mismatch`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel.cli.main import main
from accel.launch import prepare


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        prepare, "_gpu_count", lambda config: 0 if config.settings.launch.use_cpu else 1
    )


def test_two_workers_on_one_gpu_stop_with_one_line(
    one_gpu: None, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "train.py").write_text("raise SystemExit('must not run')\n")
    code = main(["launch", "-n", "2", "train.py"])
    err = capsys.readouterr().err
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "2 workers need a GPU each but 1 GPU is visible" in line
    assert "-n 1" in line and "--gpu-ids" in line and "--cpu" in line
    assert not (project / ".accelerate" / "logs" / "runs").exists()  # nothing started


def test_cpu_flag_plans_them_on_the_cpu(
    one_gpu: None, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "train.py").write_text("")
    assert main(["launch", "-n", "2", "--cpu", "--dry-run", "--json", "train.py"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["nproc_per_node"] == 2 and plan["worker_env"]["ACCELERATE_USE_CPU"] == "true"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_refused_launch_ends_the_template_it_started_early(
    one_gpu: None, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch.preload starts the template while the launcher counts GPUs; when the count
    refuses the plan, the template ends with the refusal, not when the process exits."""
    from accel.launch import preload

    started: list[Any] = []
    real_start = preload._start

    def start(*args: Any) -> Any:
        started.append(real_start(*args))
        return started[-1]

    monkeypatch.setattr(preload, "_start", start)
    monkeypatch.setenv("ACCEL_LAUNCH_PRELOAD", "true")
    (project / "train.py").write_text("raise SystemExit('must not run')\n")
    assert main(["launch", "-n", "2", "train.py"]) == 2
    (proc,) = started
    assert proc.poll() is not None  # ended (and reaped), not left to the interpreter's exit
    assert not preload._early
