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
    from accel.accelerator import (
        Accelerator,
        DataLoaderConfiguration,
        DistributedType,
        ProjectConfiguration,
    )

__all__ = [
    "AccelError",
    "Accelerator",
    "DataLoaderConfiguration",
    "DistributedType",
    "ProjectConfiguration",
    "Workspace",
    "__version__",
]
_FACADE = ("Accelerator", "DataLoaderConfiguration", "DistributedType", "ProjectConfiguration")


def __getattr__(name: str) -> Any:
    if name in _FACADE:
        import accel.accelerator

        return getattr(accel.accelerator, name)
    raise AttributeError(f"module 'accel' has no attribute {name!r}")
