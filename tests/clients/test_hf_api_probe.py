"""The API probe: the same calls on Hugging Face Accelerate's ``Accelerator`` and on
``accel.Accelerator`` give the same results (tests/clients/scripts/hf_probe.py holds
the calls).

In one process for the quick check; on 2 CPU ranks (gloo) under ``torchrun`` with
Accelerate and under ``accel launch --cpu -n 2`` with accel, for the collectives, the
data sharding and gradient accumulation. Needs ``accelerate`` (``pytest -m clients``).
Accelerate's results are also kept in hf_probe_golden.json (one process) and
hf_probe_golden_2ranks.json, which tests/test_accelerator_hf_api.py checks accel
against without Accelerate installed; the tests here keep those files true to it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from run_helpers import free_port

SCRIPTS = Path(__file__).resolve().parent / "scripts"
GOLDEN = SCRIPTS / "hf_probe_golden.json"
GOLDEN_2 = SCRIPTS / "hf_probe_golden_2ranks.json"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.clients
sys.path.insert(0, str(SCRIPTS))

import hf_probe  # noqa: E402


def differences(theirs: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    return {
        row: {"accelerate": theirs[row], "accel": ours.get(row)}
        for row in theirs
        if ours.get(row) != theirs[row]
    }


def test_probe_matches_accelerate_in_one_process(project: Path) -> None:
    pytest.importorskip("accelerate")
    make, types = hf_probe.hf_factory()
    theirs = hf_probe.probe(make, project / "hf", types)
    make, types = hf_probe.accel_factory()
    ours = hf_probe.probe(make, project / "accel", types)
    assert not [row for row, value in theirs.items() if str(value).startswith("error")]
    assert differences(theirs, ours) == {}
    assert json.loads(GOLDEN.read_text()) == theirs  # the fast lane's copy is current


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
def test_probe_matches_accelerate_on_two_ranks(project: Path, accel_exe: list[str]) -> None:
    pytest.importorskip("accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = project / "out"
    out.mkdir()
    script = str(SCRIPTS / "hf_probe.py")
    for which, launcher in (
        ("hf", [str(TORCHRUN), "--nproc-per-node", "2", "--master-port", str(free_port())]),
        ("accel", [*accel_exe, "launch", "--cpu", "-n", "2"]),
    ):
        done = subprocess.run(
            [*launcher, script, which, str(out)],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert done.returncode == 0, f"{which}:\n{done.stdout}\n{done.stderr}"
    for rank in (0, 1):
        theirs = json.loads((out / f"hf-rank{rank}.json").read_text())
        ours = json.loads((out / f"accel-rank{rank}.json").read_text())
        assert not [row for row, value in theirs.items() if str(value).startswith("error")]
        assert differences(theirs, ours) == {}, f"rank {rank}"
        assert json.loads(GOLDEN_2.read_text())[f"rank{rank}"] == theirs  # the slow lane's copy
    # the rows that tell 2 ranks from 1: rank 0 takes whole batches in turn (HF's sharding)
    first = json.loads((out / "accel-rank0.json").read_text())
    assert first["sharding"]["plain"][0] == [0.0, 1.0]
    assert first["sharding"]["plain"][1] == [4.0, 5.0]
    assert first["gather"]["1d"] == ["int64", [0, 10, 1, 11]]


def test_distributed_type_has_accelerates_members() -> None:
    pytest.importorskip("accelerate")
    from accelerate import DistributedType as Theirs

    from accel import DistributedType as Ours

    # a new release's new member fails here (and the list in test_accelerator_hf_api.py)
    assert {m.name for m in Ours} == {m.name for m in Theirs}
    assert all(Ours[m.name] == m for m in Theirs)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_accelerates_own_helpers_see_every_rank_beside_accels_accelerator(
    project: Path, accel_exe: list[str]
) -> None:
    # accelerate.utils' gather_object saw one process: a metric from half the samples,
    # silently; accelerate.logging raised "initialize the accelerate state".
    pytest.importorskip("accelerate")
    out = project / "out"
    out.mkdir()
    done = subprocess.run(
        [*accel_exe, "launch", "--cpu", "-n", "2", str(SCRIPTS / "hf_utils_beside.py"), str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        report = json.loads((out / f"rank-{rank}.json").read_text())
        assert report["objects"] == report["tensors"] == list(range(8)), report
        assert (report["processes"], report["index"]) == (2, rank)
        assert report["type"] == "DistributedType.MULTI_CPU"
