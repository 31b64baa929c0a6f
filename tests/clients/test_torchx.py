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


def torchx_run(project: Path, *args: str, path: str = "") -> tuple[str, list[dict[str, str]]]:
    """``torchx run -s local_cwd ARGS`` in ``project`` (``path`` first on PATH): what it
    said, and each rank's environment, after checking the job formed one world of 2."""
    torchx = shutil.which("torchx", path=str(Path(sys.executable).parent))
    if torchx is None:
        pytest.skip("TorchX is not installed: pip install torchx")
    out = project / "out"
    out.mkdir()
    done = subprocess.run(
        [torchx, "run", "-s", "local_cwd", *args, "--", str(out), "--all-reduce"],
        cwd=project, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PATH": f"{path}:{os.environ['PATH']}"},
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Job finished: SUCCEEDED" in said, said
    dumps = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [d["all_reduce"] for d in dumps] == [3.0, 3.0]  # one world: 1 + 2
    ranks = [d["env"] for d in dumps]
    assert [(e["RANK"], e["WORLD_SIZE"]) for e in ranks] == [("0", "2"), ("1", "2")]
    return said, ranks


def test_torchx_runs_accel_launch_replicas_as_one_world(project: Path) -> None:
    component = f"{SCRIPTS / 'torchx_components.py'}:accel_ddp"
    accel_bin = str(Path(accel_command()[0]).parent)
    said, ranks = torchx_run(
        project, component, "--script", str(DUMP), "--port", str(free_port()), path=accel_bin
    )
    # TorchX's own, taken as torchrun's --log-dir: each replica makes torchrun's folder
    # there (TorchX removes its temporary app folder when the job ends)
    (log_dir,) = {e["PET_LOG_DIR"] for e in ranks}
    assert "(--log-dir)" in said and said.count(f"torchrun's log files in {log_dir}/") == 2


@pytest.mark.parametrize("shape", ["1x2", "2x1"])
def test_torchx_stock_dist_ddp_with_torchrun_replaced_by_accel_launch(
    project: Path, tmp_path: Path, shape: str
) -> None:
    """TorchX's own ``dist.ddp`` component, unchanged: it writes ``torchrun --rdzv_backend
    c10d --rdzv_endpoint localhost:0 (one node) or $TORCHX_RANK0_HOST:PORT --rdzv_id APP
    --nnodes N --nproc_per_node M --tee 3 --role '' SCRIPT``. A ``torchrun`` on PATH that
    is ``accel launch`` must form the same world (``--tee 3`` was read as the script)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    accel_exe = " ".join(accel_command())
    (shim / "torchrun").write_text(f'#!/bin/sh\nexec {accel_exe} launch "$@"\n')
    (shim / "torchrun").chmod(0o755)
    args = ["dist.ddp", "-j", shape, "--script", str(DUMP), "--rdzv_port", str(free_port())]
    said, ranks = torchx_run(project, *args, path=str(shim))
    assert [e["ROLE_NAME"] for e in ranks] == ["", ""]  # --role '', as under torchrun
    assert "accel: run " in said  # accel launched it, not torch's torchrun
