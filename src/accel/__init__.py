"""accel: workspace state for PyTorch training.

``import accel`` is cheap: torch is imported only by what needs it
(``accel.Accelerator`` and tensor I/O), on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel._version import __version__
from accel.errors import AccelError
from accel.workspace import Workspace

if TYPE_CHECKING:
    from accel.accelerator import Accelerator

__all__ = ["AccelError", "Accelerator", "Workspace", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Accelerator":
        from accel.accelerator import Accelerator

        return Accelerator
    raise AttributeError(f"module 'accel' has no attribute {name!r}")
