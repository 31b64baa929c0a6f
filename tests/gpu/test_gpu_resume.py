"""Crash + --max-restarts on CUDA resumes bit for bit: fp32, bf16, and fp16 with its scaler.

Deterministic algorithms on (``CUBLAS_WORKSPACE_CONFIG``), one worker per GPU, the last
rank crashes at step 25 of 40 and the run resumes from the checkpoint of step 20.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gpuutil import EXAMPLE, GPU, SCRIPTS, launch_auto

pytestmark = GPU

TRAIN = ("--steps", "40", "--save-every", "10", "--log-every", "5")
DETERMINISTIC = ("--env", "CUBLAS_WORKSPACE_CONFIG=:4096:8")


def _launch(project: Path, name: str, precision: str, crash_at: int, *extra: str) -> str:
    done = launch_auto(
        project,
        name,
        "--mixed-precision",
        precision,
        *DETERMINISTIC,
        *extra,
        str(SCRIPTS / "crash_once.py"),
        str(EXAMPLE),
        str(crash_at),
        *TRAIN,
    )
    return done.stdout + done.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("precision", ["no", "bf16", "fp16"])
def test_crash_and_restart_resumes_bit_for_bit(project: Path, precision: str) -> None:
    from accel.workspace import Workspace

    _launch(project, "clean", precision, 0)
    crashed = _launch(project, "crashed", precision, 25, "--max-restarts", "1")
    assert "simulated crash at step 25" in crashed
    assert "resumed from the checkpoint of step 20" in crashed

    ws = Workspace(project / ".accelerate")
    a, b = ws.checkpoints.load(series="clean"), ws.checkpoints.load(series="crashed")
    assert a["step"] == b["step"] == 40
    for name, tensor in a["models"][0].items():
        assert torch.equal(tensor, b["models"][0][name]), f"{precision}: {name} differs"
    if precision == "fp16":  # the scaler's state went through the checkpoint too
        assert a["scaler"] is not None and a["scaler"] == b["scaler"]
    else:
        assert a["scaler"] is None
