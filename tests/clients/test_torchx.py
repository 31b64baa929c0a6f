"""TorchX for real: its local scheduler runs a component whose entrypoint is ``accel
launch``, two replicas with TorchX's ``PET_*`` variables; they form one world of 2. A
marked ``clients`` test: ``pip install torchx``, then ``pytest -m clients`` (.ci/run
does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from run_helpers import accel_command, free_port

SCRIPTS = Path(__file__).resolve().parent / "scripts"
DUMP = Path(__file__).resolve().parents[1] / "launch" / "scripts" / "env_dump.py"

pytestmark = [pytest.mark.clients, pytest.mark.slow, pytest.mark.timeout(300)]


def test_torchx_runs_accel_launch_replicas_as_one_world(project: Path) -> None:
    torchx = shutil.which("torchx", path=str(Path(sys.executable).parent))
    if torchx is None:
        pytest.skip("TorchX is not installed: pip install torchx")
    out = project / "out"
    out.mkdir()
    component = f"{SCRIPTS / 'torchx_components.py'}:accel_ddp"
    accel_bin = str(Path(accel_command()[0]).parent)
    done = subprocess.run(
        [torchx, "run", "-s", "local_cwd", component, "--script", str(DUMP),
         "--port", str(free_port()), "--", str(out), "--all-reduce"],
        cwd=project, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PATH": f"{accel_bin}:{os.environ['PATH']}"},
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Job finished: SUCCEEDED" in said, said
    dumps = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [d["all_reduce"] for d in dumps] == [3.0, 3.0]  # one world: 1 + 2
    ranks = [d["env"] for d in dumps]
    assert [(e["RANK"], e["WORLD_SIZE"]) for e in ranks] == [("0", "2"), ("1", "2")]
    assert all(e["PET_LOG_DIR"] for e in ranks)  # TorchX's own, not used, never an error
    assert "PET_LOG_DIR not used" in said
