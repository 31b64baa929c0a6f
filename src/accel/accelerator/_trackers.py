"""Experiment trackers through ``log_with``, as Hugging Face Accelerate has them.

``log_with="tensorboard"`` (or ``"all"``) gives a TensorBoard writer in
``<logging_dir>/<project_name>`` once ``init_trackers(project_name, config)`` is
called, on the main process only, writing what Accelerate's ``TensorBoardTracker``
writes (scalars, text, grouped scalars, the config as hparams). A tracker object
(anything with ``name``, ``start``, ``log``, ``store_init_configuration`` and
``finish``, such as Accelerate's own ``WandBTracker(...)``) is used as it is. Other
tracker names are refused at construction: accel does not ship their clients.
"""

from __future__ import annotations

import os
import time
from typing import Any

from accel.errors import UsageError

_KNOWN_ELSEWHERE = (
    "aim",
    "wandb",
    "trackio",
    "comet_ml",
    "mlflow",
    "clearml",
    "dvclive",
    "swanlab",
)


def is_tracker(obj: Any) -> bool:
    return all(hasattr(obj, name) for name in ("name", "log", "finish")) and not isinstance(
        obj, str
    )


def requested(log_with: Any, logging_dir: str | None) -> list[Any]:
    """The trackers ``log_with`` asks for: ``"tensorboard"`` and tracker objects."""
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    out: list[Any] = []
    for item in items:
        if is_tracker(item):
            out.append(item)
            continue
        name = str(getattr(item, "value", item)).lower()
        if name in ("tensorboard", "all"):
            if logging_dir is None:
                raise UsageError(
                    f"log_with={name!r} needs a folder to write to: pass project_dir "
                    "(or project_config=ProjectConfiguration(logging_dir=...))"
                )
            if "tensorboard" not in out:
                out.append("tensorboard")
        elif name in _KNOWN_ELSEWHERE:
            raise UsageError(
                f"log_with={name!r}: accel logs to TensorBoard and its metrics.jsonl; for "
                f"{name} pass the tracker object itself (accelerate.tracking's trackers work)"
            )
        else:
            raise UsageError(f"log_with={name!r} is not a tracker accel knows; use 'tensorboard'")
    return out


class TensorBoardTracker:
    """Accelerate's ``TensorBoardTracker``: ``<logging_dir>/<run_name>``."""

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str, **kwargs: Any) -> None:
        self.run_name = run_name
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.init_kwargs = kwargs
        self.writer: Any = None

    def start(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.logging_dir, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        import yaml

        values = _hidden(values)
        self.writer.add_hparams(values, metric_dict={})
        self.writer.flush()
        folder = os.path.join(self.logging_dir, str(time.time()))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hparams.yml"), "w") as out:
            yaml.dump(values, out)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in _hidden(values).items():
            value = number(value)
            if isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                self.writer.add_scalars(key, value, global_step=step, **kwargs)
        self.writer.flush()

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()


def start(
    wanted: list[Any],
    project_name: str,
    logging_dir: str | None,
    config: dict[str, Any] | None,
    init_kwargs: dict[str, Any] | None,
) -> list[Any]:
    """The trackers, started, with ``config`` stored in each."""
    init_kwargs = init_kwargs or {}
    trackers = [
        TensorBoardTracker(project_name, str(logging_dir), **init_kwargs.get("tensorboard", {}))
        if item == "tensorboard"
        else item
        for item in wanted
    ]
    for tracker in trackers:
        if hasattr(tracker, "start"):
            tracker.start()
    if config is not None:
        for tracker in trackers:
            tracker.store_init_configuration(config)
    return trackers


def _hidden(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as accel's own files hold them: under a secret name hidden, every known
    secret (this process's variables and command line) scrubbed out of the text."""
    import sys

    from accel._redact import redact_mapping, secret_values

    return redact_mapping(values, secret_values(os.environ, argv=sys.argv))


def number(value: Any) -> Any:
    """A one-element tensor or numpy value as the Python number it holds (Accelerate's
    trackers take ``loss`` as a tensor); anything else as it is."""
    size = getattr(value, "numel", getattr(value, "size", None))
    size = size() if callable(size) else size
    item = getattr(value, "item", None)
    if size == 1 and callable(item) and not isinstance(value, (int, float, str, bool)):
        return item()
    return value


def flat_metrics(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` for ``metrics.jsonl``: a dict of scalars (TensorBoard's ``add_scalars``)
    becomes ``key/sub`` entries, a list or tuple of them ``key/0``, ``key/1``... (a
    scheduler's ``get_last_lr()``, one per parameter group: an Accelerate script logs it
    as it is, and a list killed the run)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update({f"{key}/{sub}": v for sub, v in value.items()})
        elif isinstance(value, (list, tuple)):
            out.update({f"{key}/{i}": v for i, v in enumerate(value)})
        else:
            out[key] = value
    return out
