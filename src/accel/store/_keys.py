"""Cache keys: ``/``-separated names that can never address anything outside the cache."""

from __future__ import annotations

from typing import Any

from accel.errors import UsageError

ENTRY_SUFFIX = ".entry"
MAX_KEY_LENGTH = 512
MAX_SEGMENT_BYTES = 200  # leaves room for ".entry" and temp suffixes under NAME_MAX


def key_problem(key: Any) -> str | None:
    """Why ``key`` is not a valid cache key, or None."""
    if not isinstance(key, str):
        return f"it is a {type(key).__name__}, not a string"
    if not key:
        return "it is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"it is longer than {MAX_KEY_LENGTH} characters"
    if "\\" in key:
        return "it contains a backslash (use '/' between namespaces)"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in key):
        return "it contains a control character"
    for segment in key.split("/"):
        problem = _segment_problem(segment)
        if problem:
            return problem
    return None


def _segment_problem(segment: str) -> str | None:
    if not segment:
        return "it has an empty part (leading, trailing or doubled '/')"
    if segment.startswith("."):
        return f"its part {segment!r} starts with '.'"
    if segment.endswith(ENTRY_SUFFIX):
        return f"its part {segment!r} ends with {ENTRY_SUFFIX!r}"
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        return f"a part is longer than {MAX_SEGMENT_BYTES} bytes"
    return None


def check_key(key: Any) -> str:
    problem = key_problem(key)
    if problem:
        raise UsageError(
            f"invalid cache key {key!r}: {problem}; use names like 'datasets/train-index' "
            "(parts separated by '/', no '..', no leading '.' or '/')"
        )
    return str(key)
