"""accel: workspace state for PyTorch training.

``import accel`` is cheap: torch is imported only by what needs it
(``accel.Accelerator`` and tensor I/O), on first use, and ``Workspace`` loads on first
use too: the ``accel`` command imports this package before its Ctrl-C handling exists
(``accel.cli.run``), so it holds next to nothing.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from accel._version import __version__
from accel.errors import AccelError

if TYPE_CHECKING:
    from accel.accelerator import (
        Accelerator,
        DataLoaderConfiguration,
        DistributedType,
        ProjectConfiguration,
    )
    from accel.workspace import Workspace

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
    if name == "Workspace":
        from accel.workspace import Workspace

        return Workspace
    raise AttributeError(f"module 'accel' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What ``dir(accel)`` and tab completion offer: the public names, the facade's
    included (it loads on first use), and the submodules loaded; not ``typing``'s."""
    loaded = (name for name, value in globals().items() if isinstance(value, ModuleType))
    return sorted({*__all__, *loaded})
