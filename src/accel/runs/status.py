"""How a run ended (or that it has not): the ``status`` of its ``run.json``.

A ``str`` enum, so the record stays byte-for-byte what it was: ``json`` writes the value
and comparing with the plain string still holds. A record may hold a status this accel
does not know (written by another version, or by hand): :func:`parse` keeps it as text.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["RunStatus", "parse"]


class RunStatus(str, Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    HUNG = "hung"  # stopped by the hang watch (``--hang-action kill``)
    CRASHED = "crashed"  # derived: run.json says running but no launcher holds the lock

    # Shown as the value everywhere (Python 3.10's str mixin would show RunStatus.HUNG).
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


def parse(value: object) -> RunStatus | str | None:
    """The stored status: a :class:`RunStatus` when known, the text as it is otherwise,
    None when there is none (or it is not text)."""
    if not isinstance(value, str):
        return None
    try:
        return RunStatus(value)
    except ValueError:
        return value
