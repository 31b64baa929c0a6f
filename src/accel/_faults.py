"""Named points between the filesystem steps of accel's multi-step commits.

Crash tests run a child process whose hook SIGKILLs it at one named point, then check
what is left on disk; a recording hook lists every point a commit passes, so the tests
cover each one. In normal use no hook is set and a point costs one global lookup.
"""

from __future__ import annotations

from collections.abc import Callable

_hook: Callable[[str], None] | None = None


def point(name: str) -> None:
    """Mark the instant between two filesystem steps (see the module docstring)."""
    if _hook is not None:
        _hook(name)


def set_hook(hook: Callable[[str], None] | None) -> None:
    """Install ``hook`` (called with each point's name), or remove it with None."""
    global _hook
    _hook = hook
