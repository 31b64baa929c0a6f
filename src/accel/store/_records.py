"""Checks shared by the readers of accel's JSON records (manifest, cache metadata).

Each reader says what its record is called; these say what is wrong with it, in one
line, as an :class:`~accel.errors.IntegrityError`.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from accel._fs import JSON_INT_MAX
from accel.errors import IntegrityError

# The last second datetime can show (9999-12-31): a later or negative recorded time is
# damage, never a time to compute an age from.
MAX_SECONDS = 253402300799.0


class Invalid:
    """The errors of one record: ``Invalid("a checkpoint manifest", where)("why")``."""

    def __init__(self, what: str, where: str) -> None:
        self.what, self.where = what, where

    def __call__(self, why: str) -> IntegrityError:
        return IntegrityError(f"{self.where} is not a valid {self.what}: {why}")


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def versioned_object(data: Any, fmt: int, bad: Invalid, noun: str) -> dict[str, Any]:
    """``data`` as a JSON object of format ``fmt``; a newer format says to upgrade."""
    if not isinstance(data, dict):
        raise bad("it is not a JSON object")
    found = data.get("format")
    if is_int(found) and found > fmt:
        raise IntegrityError(
            f"{bad.where} has {noun} format {found}, newer than this accel reads ({fmt}); "
            "upgrade accel to use it"
        )
    if found != fmt or not is_int(found):
        raise bad(f"its format is {found!r}, not {fmt}")
    return data


def seconds(value: Any, name: str, bad: Invalid) -> float:
    """A recorded time (unix seconds, from 0 to :data:`MAX_SECONDS`)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= MAX_SECONDS
    ):
        raise bad(f"{name!r} is {value!r}, not a time in seconds")
    return float(value)


def optional_str(data: dict[str, Any], key: str, bad: Invalid) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise bad(f"{key!r} is {value!r}, not a string or null")
    return value


def digest_fields(entry: Any) -> tuple[int, str] | None:
    """``(size, checksum)`` of ``{"size": int >= 0, "checksum": non-empty str}``."""
    size = entry.get("size") if isinstance(entry, dict) else None
    checksum = entry.get("checksum") if isinstance(entry, dict) else None
    if not is_int(size) or not 0 <= size <= JSON_INT_MAX:
        return None
    if not isinstance(checksum, str) or not checksum:
        return None
    return size, checksum
