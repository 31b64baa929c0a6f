"""torch_xla under ``accel launch``, on the CPU (``PJRT_DEVICE=CPU``): a training step on
the XLA device gives plain torch's numbers, and two workers see what torchrun's see.
torch_xla pairs with one torch release each (torch_xla 2.9.0 with torch 2.9.0 was the
newest on PyPI in December 2026) and is a 292 MB library, so it is not in CI's installs:
install the pair (``pip install torch==2.9.0 torch_xla==2.9.0``), then ``pytest -m
clients tests/clients/test_xla.py``; without torch_xla these tests skip."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from run_helpers import accel

SCRIPT = Path(__file__).resolve().parent / "scripts" / "xla_train.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))
XLA_ENV = {"PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "1"}

pytestmark = [
    pytest.mark.clients,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        importlib.util.find_spec("torch_xla") is None,
        reason="torch_xla is not installed (pip install torch==2.9.0 torch_xla==2.9.0)",
    ),
]


def ranks(out: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(n)]


def launched(project: Path, n: int) -> list[dict[str, Any]]:
    out = project / f"accel-{n}"
    out.mkdir()
    done = accel(project, "launch", "-n", str(n), str(SCRIPT), str(out), env=XLA_ENV, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    return ranks(out, n)


def test_an_xla_training_step_on_one_worker(project: Path) -> None:
    (found,) = launched(project, 1)
    assert found["device"] == "xla:0"
    assert found["xla"] == pytest.approx(found["cpu"], abs=1e-6)


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
def test_two_xla_workers_see_what_torchrun_gives_them(project: Path) -> None:
    """torch_xla's CPU client is one process's own: ``xla://`` makes each worker a world
    of 1 (rank 0), under torchrun as under accel; the two runs must agree on that."""
    ours = launched(project, 2)
    out = project / "torchrun"
    out.mkdir()
    command = [str(TORCHRUN), "--nproc-per-node", "2", str(SCRIPT), str(out)]
    done = subprocess.run(
        command, cwd=project, capture_output=True, text=True, timeout=400,
        env={**os.environ, **XLA_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert ours == ranks(out, 2)
    assert [r["env"] for r in ours] == [["0", "2"], ["1", "2"]]
    assert [r["xla_group"] for r in ours] == [[0, 1, 1.0], [0, 1, 1.0]]
