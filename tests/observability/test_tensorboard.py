"""accel.accelerator._tensorboard: scalars into TensorBoard event files, nothing without tensorboard."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accel.accelerator import _tensorboard as metrics_tb


def test_scalars_keep_numbers_and_one_element_tensors_only() -> None:
    torch = pytest.importorskip("torch")
    metrics = {"loss": torch.tensor(0.5), "n": 3, "flag": True, "name": "x", "v": torch.ones(2)}
    assert metrics_tb.scalars(metrics) == {"loss": 0.5, "n": 3.0}


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
