"""load_state: a checkpoint it did not write, and a resume past a corrupted newest one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

import accel
from accel.errors import IntegrityError, UsageError
from run_helpers import two_ranks

# On the oldest supported torch too (.ci/run): this leans on torch's internals.
pytestmark = pytest.mark.edge

SCRIPTS = Path(__file__).parent / "store" / "scripts"


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _prepared() -> tuple[accel.Accelerator, torch.nn.Module]:
    acc = accel.Accelerator()
    model = acc.prepare(torch.nn.Linear(2, 2))
    return acc, model


def test_a_checkpoint_save_state_did_not_write_is_refused_in_one_line(project: Path) -> None:
    acc, _ = _prepared()
    acc.workspace.checkpoints.save({"weights": torch.ones(2)}, 5)
    with pytest.raises(UsageError) as err:
        acc.load_state()
    message = str(err.value)
    assert "\n" not in message and "not written by Accelerator.save_state" in message
    assert "ws.checkpoints.load(5)" in message and "'weights'" in message
    with pytest.raises(UsageError, match="ws.checkpoints.load"):
        acc.load_state(5)


def test_a_bare_accelerator_refuses_it_too_not_a_key_error(project: Path) -> None:
    acc = accel.Accelerator()
    acc.workspace.checkpoints.save({"weights": torch.ones(2)}, 5)
    with pytest.raises(UsageError, match=r"ws\.checkpoints\.load\(5\)"):
        acc.load_state()


def test_resume_falls_back_past_a_newest_checkpoint_that_does_not_verify(project: Path) -> None:
    acc, model = _prepared()
    with torch.no_grad():
        model.weight.fill_(1.0)
    acc.save_state(1)
    with torch.no_grad():
        model.weight.fill_(2.0)
    acc.save_state(2)
    acc.checkpoints.wait()
    newest = acc.checkpoints.latest()
    assert newest is not None and newest.step == 2
    _corrupt(newest.path / "state.tensors")
    with pytest.warns(RuntimeWarning) as caught:
        assert acc.load_state() == 1
    line = str(caught[0].message)
    assert "step 2" in line and "resuming from step 1" in line
    assert "accel checkpoints rm 2 --series default --force" in line
    assert torch.equal(model.weight, torch.ones(2, 2))
    log = (acc.workspace.logs_dir / "training.log").read_text()
    assert "accel checkpoints rm 2" in log
    # A step asked for is never swapped for another.
    with pytest.raises(IntegrityError):
        acc.load_state(2)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_ranks_resume_together_from_the_newest_step_both_can_read(tmp_path: Path) -> None:
    workspace = tmp_path / ".accelerate"
    codes = _ranks(
        workspace, SCRIPTS / "train.py", ["16", "8", "-1", str(tmp_path / "w.pt")], tmp_path
    )
    assert codes == [0, 0], _errors(tmp_path)  # CI64 on torch 2.15: [1, 1], no stderr shown
    ckpts = accel.Workspace(workspace).checkpoints
    assert [i.step for i in ckpts.list()] == [8, 16]
    _corrupt(ckpts.list()[-1].path / "rank-1.tensors")
    out = tmp_path / "out"
    out.mkdir()
    assert _ranks(workspace, SCRIPTS / "resume_step.py", [str(out)], tmp_path) == [0, 0]
    assert [(out / f"rank-{r}.txt").read_text() for r in range(2)] == ["8", "8"]
    err0, err1 = ((tmp_path / f"err-{r}.txt").read_text() for r in range(2))
    for err in (err0, err1):
        assert "step 16 of series 'default' does not verify on rank 1" in err
        assert "accel checkpoints rm 16 --series default --force" in err
    assert "rank-1.tensors" in err1


def _errors(logs: Path) -> str:
    """Both ranks' stderr (two_ranks writes it into err-N.txt), for a failed assertion."""
    return "\n".join(f"rank {r}: {(logs / f'err-{r}.txt').read_text()[-3000:]}" for r in range(2))


def _ranks(workspace: Path, script: Path, args: list[str], logs: Path) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env.update(ACCEL_WORKSPACE=str(workspace), OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    try:
        return two_ranks(script, args, env, logs)
    except subprocess.TimeoutExpired:  # CI66 on torch 2.6: a hang; show where each rank was
        raise AssertionError(f"{script.name} hung:\n{_errors(logs)}") from None
