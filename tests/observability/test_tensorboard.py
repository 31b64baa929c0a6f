"""accel.accelerator._tensorboard: scalars into TensorBoard event files, nothing without tensorboard."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from accel.accelerator import _tensorboard as metrics_tb


def test_scalars_keep_numbers_and_one_element_tensors_only() -> None:
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    metrics = {"loss": torch.tensor(0.5), "n": 3, "flag": True, "name": "x", "v": torch.ones(2)}
    metrics |= {"acc": np.float32(0.25), "one": np.array([2.0]), "many": np.ones(2)}
    assert metrics_tb.scalars(metrics) == {"loss": 0.5, "n": 3.0, "acc": 0.25, "one": 2.0}


def test_the_tensorboard_tracker_logs_tensors_and_numpy_numbers(
    project: Path, tmp_path: Path
) -> None:
    # log_with="tensorboard" wrote only Python numbers: a loss logged as a tensor (as
    # Accelerate's examples do) and a numpy accuracy were silently missing
    pytest.importorskip("tensorboard")
    import numpy as np
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import accel

    acc = accel.Accelerator(log_with="tensorboard", project_dir=str(tmp_path))
    acc.init_trackers("exp")
    for step in range(3):
        acc.log({"loss": torch.tensor(1.0 / (step + 1)), "acc": np.float32(step)}, step=step)
    acc.end_training()
    events = EventAccumulator(str(tmp_path / "exp"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["acc", "loss"]
    assert [round(e.value, 3) for e in events.Scalars("loss")] == [1.0, 0.5, 0.333]
    assert [e.value for e in events.Scalars("acc")] == [0.0, 1.0, 2.0]


def test_the_tensorboard_tracker_writes_no_secret(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its text summaries and hparams.yml were written as given, secrets and all
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import accel

    secret = "hf_tracker_secret_0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    acc = accel.Accelerator(log_with="tensorboard", project_dir=str(tmp_path))
    acc.init_trackers("exp", config={"lr": 0.1, "hf_token": secret, "note": f"auth {secret}"})
    acc.log({"note": f"logged in with {secret}", "loss": 0.5}, step=1)
    acc.end_training()
    files = [p for p in (tmp_path / "exp").rglob("*") if p.is_file()]
    assert any(p.name == "hparams.yml" for p in files)
    assert not [p for p in files if secret.encode() in p.read_bytes()]
    events = EventAccumulator(str(tmp_path / "exp"), size_guidance={"tensors": 0})
    events.Reload()
    assert "note/text_summary" in events.Tags()["tensors"]


def test_a_metric_of_many_numbers_is_one_line(project: Path) -> None:
    # torch's "a Tensor with 3 elements cannot be converted to Scalar" crashed training
    import numpy as np
    import torch

    import accel
    from accel.errors import UsageError

    acc = accel.Accelerator()
    for value, shape in ((torch.ones(3), "(3,)"), (np.ones((2, 2)), "(2, 2)")):
        with pytest.raises(UsageError, match=re.escape(f"of shape {shape}; log numbers")):
            acc.log({"vec": value}, step=1)


def test_events_are_readable_by_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = metrics_tb.open_tensorboard(tmp_path, rank=1)
    assert logger is not None and logger.logdir == tmp_path / "tensorboard" / "rank-1"
    for step in range(3):
        logger.log({"loss": 1.0 / (step + 1), "note": "text"}, step)
    logger.close()
    events = EventAccumulator(str(logger.logdir))
    events.Reload()
    assert events.Tags()["scalars"] == ["loss"]
    assert [(e.step, round(e.value, 3)) for e in events.Scalars("loss")] == [
        (0, 1.0),
        (1, 0.5),
        (2, 0.333),
    ]


def test_without_tensorboard_there_is_no_logger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert not metrics_tb.tensorboard_available()
    assert metrics_tb.open_tensorboard(tmp_path, 0) is None


def test_a_broken_writer_is_dropped_not_raised(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    blocker = tmp_path / "file"
    blocker.write_text("")
    logger = metrics_tb.TensorBoardLogger(blocker / "tb")
    logger.log({"loss": 1.0}, 0)
    logger.log({"loss": 1.0}, 1)
    logger.close()
    assert logger._broken
