"""A rank's failure travels to every rank: the error map of the checkpoint collectives.

Under torch.distributed a save or load is a collective: when one rank fails, the others
must not wait forever for it, and must raise the same kind of error. A step returns
``(result, None)`` or ``(None, "<ErrorClass>:rank N: message")``; :func:`collect` turns
that back into the exception on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accel.errors import AccelError, IntegrityError, LeaseHeld, UsageError, WriteFailed
from accel.store._dist import DistContext

__all__ = ["attempt", "collect"]

Outcome = tuple[Any, str | None]


def attempt(ctx: DistContext, fn: Callable[[], Any]) -> Outcome:
    """(result, None) or (None, error): a rank's failure travels to every rank.

    A single process raises directly, keeping the original exception.
    """
    if ctx.world_size == 1:
        return fn(), None
    try:
        return fn(), None
    except AccelError as exc:
        return None, f"{type(exc).__name__}:rank {ctx.rank}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the other ranks must not wait forever
        return None, f"AccelError:rank {ctx.rank}: {type(exc).__name__}: {exc}"


def collect(outcome: Outcome, default: type[AccelError] = AccelError) -> Any:
    """The value of ``outcome``, or its error raised as the class it names."""
    value, error = outcome
    if error is None:
        return value
    name, _, message = error.partition(":")
    cls = _ERRORS.get(name, default)
    raise cls(message)


_ERRORS: dict[str, type[AccelError]] = {
    cls.__name__: cls for cls in (AccelError, UsageError, IntegrityError, WriteFailed, LeaseHeld)
}
