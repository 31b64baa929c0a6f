"""Sizes (``20GB``, ``512MiB``), durations (``30s``, ``7d``, ``1h30m``) and recorded times.

One strict ASCII grammar shared by the configuration and every command-line flag.
Pure functions: they raise :class:`~accel.errors.UsageError` with a message that says
what was expected, and never return a negative, infinite or NaN value.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from accel.errors import UsageError

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "ago",
    "duration_hint",
    "duration_text",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
    "parse_time",
    "recorded_time",
    "size_text",
]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "p": 1000**5,
    "pb": 1000**5,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "pib": 1024**5,
}
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_MAX_BYTES = 2**63 - 1
_MAX_SECONDS = 100 * 365 * 86400

_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]*)", re.ASCII)
_DURATION_PART_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])", re.ASCII)

SIZE_HELP = "a size like 512MiB, 20GB or 1024 (bytes)"
DURATION_HELP = "a duration like 30s, 15m, 12h, 7d, 2w or 1h30m"


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: decimal (KB = 1000) and binary (KiB = 1024) units, case-insensitive."""
    if isinstance(text, bool):
        raise UsageError(f"invalid size {text!r}: expected {SIZE_HELP}")
    if isinstance(text, int):
        if 0 <= text <= _MAX_BYTES:
            return text
        raise UsageError(f"invalid size {text!r}: expected {SIZE_HELP}")
    raw = str(text).strip()
    match = _SIZE_RE.fullmatch(raw) if raw.isascii() else None
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise UsageError(f"invalid size {text!r}: expected {SIZE_HELP}")
    number = match.group(1)
    value = _scaled(number, _SIZE_UNITS[unit])
    if value > _MAX_BYTES:
        raise UsageError(f"invalid size {text!r}: too large")
    return value


def parse_count(value: str | int, flag: str) -> int:
    """A count given to ``flag`` (``--keep-last``, ``--limit``, ``--tail``): a whole number,
    0 or more, in ASCII digits."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isascii() or not text.isdigit():
        raise UsageError(f"invalid {flag} {value!r}: expected a whole number >= 0")
    return int(text)


def parse_duration(text: str) -> float:
    """Seconds in ``text``: one or more ``<number><unit>`` parts, units s m h d w."""
    raw = str(text).strip()
    if not raw or not raw.isascii() or isinstance(text, bool):
        raise UsageError(f"invalid duration {text!r}: expected {DURATION_HELP}")
    if raw.isdigit() and len(raw) <= 12:  # `--older-than 7`: the unit is said, not guessed
        raise UsageError(
            f"invalid duration {text!r}: expected {DURATION_HELP}: add a unit ({raw}d, {raw}h)"
        )
    pos, total, seen = 0, 0.0, set()
    for match in _DURATION_PART_RE.finditer(raw):
        if match.start() != pos or match.group(2) in seen:
            break
        seen.add(match.group(2))
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(raw):
        raise UsageError(f"invalid duration {text!r}: expected {DURATION_HELP}{duration_hint(raw)}")
    if total > _MAX_SECONDS:
        raise UsageError(f"invalid duration {text!r}: longer than 100 years")
    return total


# The ways people write the units (systemd's, `7 days`, `90min`), for a hint only: the
# grammar stays one letter per unit, so that a value reads the same everywhere.
_SPELLED = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("d", "day", "days"), "d"),
    **dict.fromkeys(("w", "wk", "wks", "week", "weeks"), "w"),
}
_SPELLED_PART_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*,?", re.ASCII)


def duration_hint(text: str) -> str:
    """What a refusal of ``text`` ends in: ``: write 7d`` for ``7 days``, ``: write
    1h30m`` for ``1 hour 30 minutes``; "" when ``text`` is no such duration, or one
    written as it should be (``15M`` gets none: months?)."""
    parts, pos = [], 0
    for match in _SPELLED_PART_RE.finditer(text):
        word = match.group(2)
        unit = _SPELLED.get(word if word in ("m", "M") else word.lower())
        if match.start() != pos or unit is None:
            return ""
        parts.append(f"{match.group(1)}{unit}")
        pos = match.end()
    units, written = [part[-1] for part in parts], "".join(parts)
    if not parts or pos != len(text) or len(set(units)) != len(units) or len(written) > 24:
        return ""
    return f": write {written}" if written != text else ""  # as it is: too long, not misspelled


def _scaled(number: str, factor: int) -> int:
    whole, _, frac = number.partition(".")
    if len(whole) > 20:
        return _MAX_BYTES + 1
    value = int(whole) * factor
    if frac:
        value += int(frac[:18]) * factor // 10 ** len(frac[:18])
    return value


def format_size(num_bytes: int | float) -> str:
    """``1536`` -> ``1.5 KiB``; for people, never parsed back."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``93784`` -> ``1d 2h``; two most significant units, for people."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    parts: list[str] = []
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count or parts:
            parts.append(f"{int(count)}{unit}")
    return " ".join(p for p in parts[:2] if not p.startswith("0"))


_EXACT_SIZES = (
    ("PiB", 1024**5),
    ("TiB", 1024**4),
    ("GiB", 1024**3),
    ("MiB", 1024**2),
    ("KiB", 1024),
    ("PB", 1000**5),
    ("TB", 1000**4),
    ("GB", 1000**3),
    ("MB", 1000**2),
    ("KB", 1000),
)


def size_text(num_bytes: int) -> str:
    """``10485760`` -> ``10MiB``: exact, as written in a config (:func:`parse_size` reads it)."""
    exact = [(num_bytes // f, u) for u, f in _EXACT_SIZES if num_bytes >= f and not num_bytes % f]
    if not exact:
        return f"{num_bytes}B"
    count, unit = min(exact, key=lambda cu: cu[0])  # the shortest; binary units on a tie
    return f"{count}{unit}"


def duration_text(seconds: float) -> str:
    """``5400`` -> ``1h30m``: exact, as written in a config (:func:`parse_duration` reads it)."""
    whole = int(seconds)
    parts = []
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    rest = whole + (seconds - int(seconds))
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return "".join(parts)


def parse_time(text: Any) -> datetime | None:
    """A recorded ISO 8601 time (run.json's ``started_at``), UTC when it names no zone;
    None when it is missing or not a time."""
    if not isinstance(text, str) or not text:
        return None
    from datetime import timezone  # not at import: the CLI starts without it

    parsed = from_iso(text)
    if parsed is None:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def local_time(text: Any) -> str:
    """A recorded ISO 8601 time as this machine's clock shows it (``2026-12-06 13:37:41``),
    whatever zone its writer was in: a record holds the writer's offset, and a run started
    under ``TZ=Asia/Kolkata`` showed "started 08:07:40 ended 13:37:44" for 3.8 s when the
    string was cut. ``?`` for no time; an unreadable one as it is, cut to 19 characters,
    and so one this clock cannot show (year 1 or 9999 moved by an offset is out of range).
    """
    parsed = parse_time(text)
    try:
        shown = parsed.astimezone() if parsed is not None else None
    except (OverflowError, ValueError, OSError):
        shown = None
    if shown is None:
        return (text if isinstance(text, str) and text else "?")[:19]
    return shown.strftime("%Y-%m-%d %H:%M:%S")


def from_iso(text: str) -> datetime | None:
    """An ISO 8601 time as Python 3.11's ``datetime.fromisoformat`` reads it, on 3.10 too
    (whose refuses a ``Z`` for UTC and a fraction of other than 3 or 6 digits: a run
    record's ``...T12:00:00Z`` was no time at all there, no age for ``accel clean``);
    None when it is not one. A time without a zone stays naive."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    text = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
    text = re.sub(r"(:\d\d)\.(\d+)", lambda m: f"{m[1]}.{m[2][:6]:0<6}", text, count=1)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def recorded_time(value: Any) -> float:
    """A recorded time as unix seconds: a number as it is, an ISO 8601 string parsed;
    0 when unknown."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    parsed = parse_time(value)
    return 0.0 if parsed is None else parsed.timestamp()


def ago(now: float, when: float | None, *, coarse: bool = False) -> str:
    """``1d 2h ago`` (``coarse``: one unit, ``1d ago``, for long listings); ``in the
    future`` for a clock ahead of this one; ``""`` when unknown."""
    if when is None:
        return ""
    return _ago_coarse(int(now - when)) if coarse else _ago_exact(now - when)


def _ago_exact(seconds: float) -> str:
    return f"{format_duration(seconds)} ago" if seconds >= 0 else "in the future"


@functools.lru_cache(maxsize=4096)
def _ago_coarse(seconds: int) -> str:
    """One unit is enough to judge a clean, and cheap for 100,000 rows."""
    if seconds < 0:
        return "in the future"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"
