"""``accel launch``: torch.distributed workers on torch's elastic agent.

Pipeline: :func:`plan_launch` (pure: config + flags + environment -> :class:`LaunchPlan`)
then :func:`launch` (runs the plan, returns a :class:`RunOutcome`). Importing this
package does not import torch; :func:`launch` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel.launch.plan import LaunchPlan, plan_launch
from accel.launch.request import LaunchRequest

if TYPE_CHECKING:
    from accel.launch.runner import RunOutcome, launch

__all__ = ["LaunchPlan", "LaunchRequest", "RunOutcome", "launch", "plan_launch"]


def __getattr__(name: str) -> Any:
    if name in ("launch", "RunOutcome"):
        from accel.launch import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'accel.launch' has no attribute {name!r}")
