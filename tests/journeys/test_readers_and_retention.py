"""Journey: a live run saving with ``keep_last: 1`` while a user exports, verifies and
shows its checkpoints with the real CLI. Retention retires a checkpoint at every
save; no reader ever calls one damaged, and every export and verify succeeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import run_helpers
from accel import Workspace

SAVER = Path(__file__).resolve().parent / "scripts" / "saver.py"
ROUNDS = 4  # each round is four CLI runs that import torch: 46 s at 8 under -n 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_readers_of_a_live_series_never_see_retention_as_damage(
    ws: Workspace, project: Path
) -> None:
    env = {**os.environ, "ACCEL_CHECKPOINTS_KEEP_LAST": "1"}
    saver = subprocess.Popen(
        [sys.executable, str(SAVER), str(ws.path), "100000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    outputs = []
    try:
        assert saver.stdout is not None and saver.stdout.readline().strip() == "ready"
        for i in range(ROUNDS):
            out = project / f"model-{i}.safetensors"
            outputs.append(run_helpers.accel(project, "checkpoints", "export", "-o", str(out)))
            outputs.append(run_helpers.accel(project, "checkpoints", "verify", "--json"))
            listed = json.loads(run_helpers.accel(project, "checkpoints", "list", "--json").stdout)
            step = str(listed["checkpoints"][-1]["step"])
            outputs.append(run_helpers.accel(project, "checkpoints", "show", step, "--json"))
    finally:
        assert saver.stdin is not None
        saver.stdin.close()
        saver.wait(60)
    assert saver.returncode == 0
    for done in outputs:
        command = done.args[done.args.index("checkpoints") + 1]
        text = done.stdout + done.stderr
        assert "damaged" not in text and "corrupt" not in text, text
        if command == "show":  # the step named may be retired before show starts
            assert done.returncode == 0 or "no checkpoint at step" in done.stderr, text
            if done.returncode == 0:
                assert json.loads(done.stdout)["state_problem"] is None
        else:
            assert done.returncode == 0, text
    verified = [json.loads(d.stdout) for d in outputs if "verify" in d.args]
    assert all(v["ok"] and not any(c["vanished"] for c in v["checkpoints"]) for v in verified)
    # The saver saved on meanwhile and retention ran: one series, few checkpoints left.
    assert len(Workspace.discover().checkpoints.list()) <= 2
