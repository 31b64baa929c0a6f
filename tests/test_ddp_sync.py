"""DDP's first broadcast waits for the first forward, and a resumed model skips it
(accel.accelerator._ddp): two real gloo ranks whose models start apart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from accel.accelerator import _ddp
from run_helpers import two_ranks

SCRIPT = Path(__file__).parent / "scripts" / "ddp_sync.py"

pytestmark = pytest.mark.skipif(
    not _ddp.defers(), reason="this torch's DDP has no init_sync: it syncs at construction"
)


def _ranks(workspace: Path, mode: str, out: Path) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env.update(ACCEL_WORKSPACE=str(workspace), OMP_NUM_THREADS="1")
    return two_ranks(SCRIPT, [mode, str(out)], env)


def _states(out: Path) -> list[dict[str, Any]]:
    return [torch.load(out / f"rank-{r}.pt", weights_only=True) for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ranks_that_start_apart_train_from_rank_0s_weights(tmp_path: Path) -> None:
    assert _ranks(tmp_path / ".accelerate", "fresh", tmp_path) == [0, 0]
    zero, one = _states(tmp_path)
    assert zero.keys() == one.keys()
    for name in zero:
        assert torch.equal(zero[name], one[name]), name
    assert float(zero["scale"]) == 1.0  # rank 0's buffer
    # At the first forward: every parameter and the buffer, once.
    assert (tmp_path / "broadcasts-1.txt").read_text() == "[[16, 8], [16], [1, 16], [1], [1]]"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_resumed_model_trains_from_the_checkpoint_and_rank_0s_buffers(tmp_path: Path) -> None:
    workspace = tmp_path / ".accelerate"
    saved, resumed = tmp_path / "saved", tmp_path / "resumed"
    saved.mkdir()
    resumed.mkdir()
    assert _ranks(workspace, "save", saved) == [0, 0]
    assert _ranks(workspace, "resume", resumed) == [0, 0]
    zero, one = _states(resumed)
    for name in zero:  # the same step from the same checkpoint: the same weights
        assert torch.equal(zero[name], one[name]), name
    reference = _states(saved)[0]
    assert not torch.equal(zero["body.0.weight"], reference["body.0.weight"])  # trained on
    assert float(one["scale"]) == 1.0  # not in the checkpoint: still rank 0's
    # The checkpoint gave every rank its parameters: only the buffer was broadcast.
    assert (resumed / "broadcasts-1.txt").read_text() == "[[1]]"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_models_that_differ_across_ranks_are_refused_at_prepare(tmp_path: Path) -> None:
    assert _ranks(tmp_path / ".accelerate", "shapes", tmp_path) == [3, 3]
    for rank in (0, 1):
        message = (tmp_path / f"refused-{rank}.txt").read_text()
        assert "differs across ranks" in message and "\n" not in message


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_model_already_in_ddp_is_refused_at_prepare(tmp_path: Path) -> None:
    # it was wrapped a second time: gradients reduced twice, and every key of its
    # checkpoints (and of `accel checkpoints export`) began with 'module.'
    assert _ranks(tmp_path / ".accelerate", "wrapped", tmp_path) == [3, 3]
    for rank in (0, 1):
        message = (tmp_path / f"refused-{rank}.txt").read_text()
        assert message.startswith("prepare(): the model is already a DistributedDataParallel")
        assert "(model.module)" in message and "\n" not in message
