"""An ``Accelerator`` inside a world another launcher started (Ray Train, ``mp.spawn``):
it joins that group, with the group's rank and size, and saves and resumes through
accel's store like under ``accel launch``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from run_helpers import free_port

SCRIPT = Path(__file__).parent / "scripts" / "joined_world.py"


def world_of_two(project: Path, out: Path) -> None:
    port = str(free_port())
    env = {**os.environ, "ACCEL_WORKSPACE": str(project / ".accelerate"), "OMP_NUM_THREADS": "1"}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(rank), port, str(out)],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_accelerator_joins_the_world_it_finds_and_resumes_in_it(project: Path) -> None:
    out = project / "out"
    out.mkdir()
    world_of_two(project, out)
    world_of_two(project, out)  # again: resumes from the first world's checkpoint
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(seen) == ["rank0-0", "rank0-3", "rank1-0", "rank1-3"]
    for start in (0, 3):
        zero, one = seen[f"rank0-{start}"], seen[f"rank1-{start}"]
        assert (zero["rank"], one["rank"], zero["world"], one["world"]) == (0, 1, 2, 2)
        assert (zero["main"], one["main"]) == (True, False)
        assert zero["weights"] == one["weights"]  # one model, its gradients averaged
        assert zero["resumed"] == one["resumed"] == (None if start == 0 else 3)
    steps = project / ".accelerate" / "checkpoints" / "default"
    assert sorted(p.name for p in steps.iterdir() if p.name.startswith("step-")) == [
        "step-000000000003",
        "step-000000000006",
    ]
