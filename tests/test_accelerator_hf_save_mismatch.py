"""Accelerate's ``save_state()`` under ``automatic_checkpoint_naming``, called on some
ranks only (``if accelerator.is_main_process: accelerator.save_state()``): the same one
CollectiveMismatch line as ``save_state(step)`` within ``checkpoints.arrival_timeout``,
not a hang in the folder's barrier (gloo's 30 minutes), and ``total_limit`` deletes
nothing for a save that never happened."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from run_helpers import accel

# The reported script: the ranks that do not save go on training, into DDP's all-reduce.
SCRIPT = """\
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator, ProjectConfiguration

savers = {int(r) for r in sys.argv[1].split(",")}
limit = int(sys.argv[2]) if len(sys.argv) > 2 else None
config = ProjectConfiguration(
    project_dir="proj", automatic_checkpoint_naming=True, total_limit=limit
)
acc = Accelerator(cpu=True, project_config=config)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
dl = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=2)
model, opt, dl = acc.prepare(model, opt, dl)
if limit is not None:
    acc.save_state()  # every rank: checkpoint_0, the one total_limit would delete
for i, (x, y) in enumerate(dl):
    acc.backward(torch.nn.functional.mse_loss(model(x), y))
    opt.step()
    opt.zero_grad()
    if i == 1 and acc.process_index in savers:
        print(f"rank {acc.process_index} saving", flush=True)
        acc.save_state()
        print(f"rank {acc.process_index} saved", flush=True)
acc.wait_for_everyone()
acc.end()
"""


def _launch(project: Path, ranks: int, *args: str) -> subprocess.CompletedProcess[str]:
    script = project / "hf_save_some_ranks.py"
    script.write_text(SCRIPT)
    env = {"ACCEL_CHECKPOINTS_ARRIVAL_TIMEOUT": "3s"}
    return accel(
        project, "launch", "--stop-grace-period", "2s", "-n", str(ranks), str(script), *args,
        env=env,
    )  # fmt: skip


def _expected(arrived: str, world: int, missing: str) -> str:
    return (
        "CollectiveMismatch: save_state is a collective: every rank must call it, but only "
        f"rank(s) {arrived} of {world} arrived within 3s (missing: {missing}); call "
        "save_state on every rank, not only on the main process"
    )


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_automatic_naming_save_on_the_main_process_only_fails_fast_and_says_why(
    project: Path,
) -> None:
    started = time.monotonic()
    done = _launch(project, 2, "0")
    assert done.returncode == 1, done.stdout + done.stderr
    assert time.monotonic() - started < 60  # not gloo's 30 minutes
    (last,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert last.startswith("error: rank 0 failed first: " + _expected("0", 2, "1")), last
    assert "rank 0 saved" not in done.stdout
    assert not (project / "proj" / "checkpoints" / "checkpoint_0").exists()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_total_limit_deletes_nothing_and_every_rank_that_waited_says_the_same(
    project: Path,
) -> None:
    done = _launch(project, 3, "0,1", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    expected = _expected("0, 1", 3, "2")
    (folder,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    for rank in (0, 1):
        assert expected in (folder / f"rank-{rank}.log").read_text(), rank
    # The failed save pruned nothing: checkpoint_0 (saved by every rank) is whole.
    checkpoints = project / "proj" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint_0"]
    assert (checkpoints / "checkpoint_0" / "accel-checkpoint.json").is_file()
