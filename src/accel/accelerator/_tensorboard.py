"""TensorBoard event files for ``Accelerator.log``, when ``tensorboard`` is installed.

An optional extra (``pip install 'accel-workspace[tensorboard]'``): without it nothing happens.
Each logging rank writes ``<run>/tensorboard/rank-<N>/``, so ``tensorboard --logdir
.accelerate/logs/runs`` shows every run (and rank) side by side. Only numbers become
scalars (tensors with one element included); a failing writer is dropped after one
warning: metrics must never kill training.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel.layout import TB_DIR, rank_name

_log = logging.getLogger("accel")


def tensorboard_available() -> bool:
    """Whether ``tensorboard`` (which ``torch.utils.tensorboard`` needs) is importable."""
    try:
        return importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):
        return False


def tensorboard_dir(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / TB_DIR / rank_name(rank)


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers among ``metrics`` (one-element tensors included); the rest is skipped."""
    from accel.accelerator._trackers import number

    out = {}
    for key, value in metrics.items():
        value = number(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[str(key)] = float(value)
    return out


class TensorBoardLogger:
    """Writes scalars to one event-file folder; the writer opens on first use."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = Path(logdir)
        self._writer: Any = None
        self._broken = False

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        values = scalars(metrics)
        if self._broken or not values:
            return
        try:
            writer = self._open()
            for key, value in values.items():
                writer.add_scalar(key, value, step)
        except Exception as exc:  # noqa: BLE001 - never kill training over TensorBoard
            self._broken = True
            _log.warning("accel: TensorBoard logging to %s disabled: %s", self.logdir, exc)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001
                pass
            self._writer = None

    def _open(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.logdir.mkdir(parents=True, exist_ok=True)
            self._writer = SummaryWriter(log_dir=str(self.logdir), flush_secs=10)
        return self._writer


def open_tensorboard(run_dir: Path, rank: int) -> TensorBoardLogger | None:
    """A logger for ``rank`` of the run in ``run_dir``; None without tensorboard."""
    if not tensorboard_available():
        return None
    return TensorBoardLogger(tensorboard_dir(run_dir, rank))
