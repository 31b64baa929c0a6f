"""A run's metrics: one JSON line per ``Accelerator.log()``, and TensorBoard events.

A write error is logged, never raised: metrics must not kill training.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel._fs import open_private_append
from accel._redact import redact_value, scrub, secret_values
from accel.accelerator._trackers import number
from accel.errors import AccelError, UsageError
from accel.layout import LOCAL_RUN, METRICS_FILE

if TYPE_CHECKING:
    from accel.accelerator._tensorboard import TensorBoardLogger
    from accel.workspace import Workspace

_log = logging.getLogger("accel")


class MetricsLog:
    """``logs/runs/<run_id>/metrics.jsonl`` (``local`` outside a run) of one rank."""

    def __init__(self, workspace: Workspace, run_id: str | None, rank: int) -> None:
        self.workspace = workspace
        self.run_id = run_id
        self.rank = rank
        self._ready = False
        self._tensorboard: TensorBoardLogger | None = None
        self._tensorboard_checked = False

    @property
    def file(self) -> Path:
        return self.workspace.runs_dir / (self.run_id or LOCAL_RUN) / METRICS_FILE

    @functools.cached_property
    def _secrets(self) -> tuple[str, ...]:
        """What the launcher scrubs from this worker's logs: its secret variables' values
        and its command line's."""
        return secret_values(os.environ, argv=sys.argv)

    def write(self, metrics: dict[str, Any], step: int) -> None:
        """Append ``{"step", "time", "rank", **metrics}``; then the TensorBoard events.
        A text is written as a log line would be: hidden under a secret name, and every
        known secret value scrubbed out of it (sync uploads the file)."""
        record = {"step": step, "time": time.time(), "rank": self.rank}
        record.update({str(k): self._shown(str(k), _scalar(k, v)) for k, v in metrics.items()})
        line = json.dumps(record, allow_nan=True) + "\n"
        try:
            if not self._ready:  # the workspace first: never a folder accel did not make
                self.workspace.ensure()
                self._ready = True
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd = open_private_append(self.file)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except AccelError as exc:  # not a workspace: nothing is written there
            _log.warning("accel: not logging metrics: %s", exc)
            return
        except OSError as exc:
            _log.warning("accel: could not write metrics to %s: %s", self.file, exc)
        self._write_tensorboard(metrics, step)

    def _shown(self, key: str, value: Any) -> Any:
        return scrub(redact_value(key, value), self._secrets) if isinstance(value, str) else value

    def _write_tensorboard(self, metrics: dict[str, Any], step: int) -> None:
        """The same scalars as TensorBoard events, when tensorboard is installed."""
        if not self._tensorboard_checked:
            from accel.accelerator._tensorboard import open_tensorboard

            self._tensorboard_checked = True
            self._tensorboard = open_tensorboard(self.file.parent, self.rank)
        if self._tensorboard is not None:
            self._tensorboard.log(metrics, step)

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()


def _scalar(key: Any, value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    value = number(value)
    if isinstance(value, (int, float, bool)):
        return value
    shape = getattr(value, "shape", None)
    of = f" of shape {tuple(shape)}" if shape is not None else ""
    raise UsageError(
        f"metric {key!r} is a {type(value).__name__}{of}; log numbers or strings "
        "(one number of a tensor: .item(), .mean().item())"
    )
