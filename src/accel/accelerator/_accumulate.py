"""Gradient accumulation as Hugging Face Accelerate does it.

``accumulate()`` counts micro-steps; every ``num_steps``-th one (and the last batch of
a prepared loader) has ``sync_gradients`` True. On the others a prepared optimizer's
``step()`` and ``zero_grad()`` do nothing, DDP does not all-reduce, ``backward()``
divides the loss by ``num_steps`` and a prepared LR scheduler does not step. A
scheduler that does step steps once per rank unless batches are split (Accelerate's
``AcceleratedScheduler``: its schedule counts samples of the per-rank batch size).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

from accel.errors import UsageError


class GradientState:
    """Whether this micro-step synchronizes, and which prepared loader is running."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = dict(options)  # num_steps, adjust_scheduler, sync_with_dataloader, ...
        self.sync_gradients = True
        self.step = 0
        self.active: list[Any] = []

    @property
    def num_steps(self) -> int:
        return int(self.options.get("num_steps", 1))

    @property
    def end_of_dataloader(self) -> bool:
        return bool(self.active) and bool(self.active[-1].end_of_dataloader)

    @property
    def remainder(self) -> int:
        return int(self.active[-1].remainder) if self.active else -1

    @property
    def in_dataloader(self) -> bool:
        return bool(self.active)

    def checkpointed(self) -> int:
        """The micro-step a checkpoint records. Between two optimizer steps a warning:
        the gradients accumulated since the last one are in no checkpoint (a resume
        accumulates those micro-steps' anew from the next batches)."""
        if not self.sync_gradients:
            warnings.warn(
                "save_state() in the middle of gradient accumulation: the gradients "
                f"accumulated over the last {self.step % self.num_steps} micro-step(s) are "
                "not saved, so a resume does not train as this run does; save where "
                "accelerator.sync_gradients is True (after the optimizer step)",
                UserWarning,
                stacklevel=4,
            )
        return self.step

    def advance(self) -> None:
        """One micro-step: sync at every ``num_steps``-th, and at the loader's end."""
        if self.options.get("sync_with_dataloader", True) and self.end_of_dataloader:
            self.step = 0
            self.sync_gradients = True
        else:
            self.step += 1
            self.sync_gradients = self.step % self.num_steps == 0


def accumulation_options(steps: Any, plugin: Any, env: dict[str, str]) -> dict[str, Any]:
    """Accelerate's plugin settings: from ``gradient_accumulation_plugin`` (its
    ``to_kwargs()``), else ``gradient_accumulation_steps``, else
    ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``."""
    if plugin is not None:
        if steps not in (None, 1):
            raise UsageError(
                "pass gradient_accumulation_steps or gradient_accumulation_plugin, not both"
            )
        to_kwargs = getattr(plugin, "to_kwargs", None)
        options = dict(to_kwargs()) if callable(to_kwargs) else dict(vars(plugin))
        options.setdefault("num_steps", getattr(plugin, "num_steps", 1))
    else:
        raw = env.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")  # wins, as in Accelerate
        options = {"num_steps": raw if raw is not None else (1 if steps is None else steps)}
    try:
        options["num_steps"] = int(options["num_steps"])
    except (TypeError, ValueError):
        raise UsageError(
            f"gradient_accumulation_steps must be a whole number, not {options['num_steps']!r}"
        ) from None
    if options["num_steps"] < 1:
        raise UsageError(
            f"gradient_accumulation_steps must be 1 or more, not {options['num_steps']}"
        )
    return options


def gate_steps(optimizer: Any, state: GradientState) -> None:
    """``optimizer.step()``/``zero_grad()`` do nothing while gradients accumulate."""
    if getattr(optimizer, "accel_gated", None) is state:
        return
    inner_step, inner_zero = optimizer.step, optimizer.zero_grad

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not state.sync_gradients:
            return None
        return inner_step(*args, **kwargs)

    def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not state.sync_gradients:
            return None
        return inner_zero(*args, **kwargs)

    # fp16's wrapper below stays recognisable, so a second prepare() does not scale twice;
    # an LR scheduler made before prepare() still sees its own wrapper (no false warning)
    for mark in ("accel_scaler", "_wrapped_by_lr_sched"):
        if hasattr(inner_step, mark):
            setattr(step, mark, getattr(inner_step, mark))
    optimizer.step = types.MethodType(step, optimizer)
    optimizer.zero_grad = types.MethodType(zero_grad, optimizer)
    optimizer.accel_gated = state


class PreparedScheduler:
    """An LR scheduler stepped as Accelerate's ``AcceleratedScheduler`` steps it."""

    def __init__(
        self, scheduler: Any, state: GradientState, times: int, with_optimizer: bool
    ) -> None:
        self.scheduler = scheduler
        self.state = state
        self.times = times
        self.step_with_optimizer = with_optimizer

    def step(self, *args: Any, **kwargs: Any) -> None:
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.state.sync_gradients:
            if self.state.options.get("adjust_scheduler", False):
                self.scheduler._step_count += 1
            return
        if getattr(self.scheduler.optimizer, "accel_step_was_skipped", False):
            return
        total = getattr(self.scheduler, "total_steps", None)
        for _ in range(self.times):
            if total is None or self.scheduler._step_count <= total:
                self.scheduler.step(*args, **kwargs)

    def state_dict(self) -> Any:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.scheduler.load_state_dict(state)

    def get_last_lr(self) -> Any:
        return self.scheduler.get_last_lr()

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
