"""fp16's gradient scaling behind a plain ``optimizer.step()``."""

from __future__ import annotations

import types
from typing import Any


def scale_steps(optimizer: Any, scaler: Any) -> None:
    """Make ``optimizer.step()`` go through ``scaler``: unscale, skip on inf/NaN, update.

    Scripts call ``optimizer.step()`` (as with Hugging Face Accelerate), not
    ``scaler.step(optimizer)``: a plain step on scaled gradients would be silently wrong.
    A bound method, so an LR scheduler created afterwards can wrap it in turn.
    """
    if getattr(optimizer.step, "accel_scaler", None) is scaler:
        return  # prepared twice: scaling twice would step twice
    inner = optimizer.step
    inside = False

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal inside
        if inside:  # GradScaler.step calling optimizer.step: the real one now
            return inner(*args, **kwargs)
        inside = True
        try:
            before = scaler.get_scale()
            result = scaler.step(self, *args, **kwargs)
            scaler.update()
            # Accelerate's step_was_skipped: the scale shrinks only when the step was skipped
            self.accel_step_was_skipped = scaler.get_scale() < before
            return result
        finally:
            inside = False

    step.accel_scaler = scaler  # type: ignore[attr-defined]
    if hasattr(inner, "_wrapped_by_lr_sched"):  # a scheduler made before prepare(): no warning
        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = types.MethodType(step, optimizer)
