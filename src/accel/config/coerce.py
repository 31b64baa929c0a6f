"""Checking configuration values: from YAML (:func:`coerce`), from text (:func:`parse_text`).

Both raise :class:`ValueError` with what was expected; callers add file, line and key.
Validation is total: every number has an upper bound (a 400-digit ``lock_timeout``,
``1e999`` or ``.nan`` is refused, never passed on to crash a later command), and so
does every string and list (an environment value the kernel could not pass on, a
list of a million GPU indices).
"""

from __future__ import annotations

import math
import re
from typing import Any

from accel.config.fields import Field
from accel.errors import UsageError
from accel.layout import SERIES_RE
from accel.units import duration_hint, parse_duration, parse_size

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_IDENTIFIER_RE = _ENV_NAME_RE  # a Python class name
_ENDPOINT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:([0-9]{1,5}))?", re.ASCII)
MAX_TEXT = 4096  # a string value: a path, an id, a backend name
MAX_ENV_VALUE = 131071  # the kernel refuses a longer environment string (MAX_ARG_STRLEN)
MAX_ENV_VARS = 1000
MAX_GPU_INDEX = 1023
MAX_NAMES = 1000


def coerce(f: Field, value: Any) -> Any:
    """Check a YAML value against ``f``; returns the normalised value or raises ValueError."""
    if value is None:
        if f.nullable:
            return None
        raise ValueError(f"expected {f.expected}, got null")
    result = _COERCE[f.kind](f, value)
    if f.choices and f.kind != "names" and result not in f.choices:
        raise ValueError(f"expected {f.expected}, got {shown(value)}")
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        low = f.minimum if f.minimum is not None else 0
        # An int is compared as an int: float() of a 400-digit number would overflow.
        if not low <= result <= (f.maximum if f.maximum is not None else result):
            raise ValueError(f"expected {f.expected}, got {shown(value)}")
    return result


def shown(value: Any) -> str:
    """``value`` for an error message, cut short: a 400-digit number is not one line."""
    text = repr(value)
    if len(text) <= 40:
        return text
    size = len(value) if isinstance(value, str) else len(text)  # not repr()'s quotes
    return f"{text[:30]}... ({size} characters)"


def read_value(f: Field, value: Any) -> Any:
    """A value typed on a command line or in a file: text is parsed, the rest checked."""
    return parse_text(f, value) if isinstance(value, str) else coerce(f, value)


def parse_text(f: Field, text: str) -> Any:
    """Read a value for ``f`` from a flag or an environment variable (always a string)."""
    stripped = text.strip()
    if f.nullable and stripped.lower() in ("", "null", "none"):
        return None
    if f.kind == "env":
        return coerce(f, _parse_env_pairs(stripped))
    return coerce(f, stripped)


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,30}", value.strip(), re.ASCII):
        return int(value)
    raise ValueError


def _coerce_int(f: Field, value: Any) -> int:
    try:
        return _int(value)
    except ValueError:
        raise ValueError(f"expected {f.expected}, got {shown(value)}") from None


def _coerce_int_or_auto(f: Field, value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _coerce_int(f, value)


def _coerce_bool(f: Field, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"expected {f.expected}, got {value!r}")


def _coerce_str(f: Field, value: Any) -> str:
    # one line: a newline (or U+0085, U+2028, which YAML and `config get` break on too) in
    # an id, a backend or a path is a paste gone wrong, not a value
    one_line = isinstance(value, str) and len(f"{value}x".splitlines()) == 1
    if one_line and value and "\0" not in value and len(value) <= MAX_TEXT:
        return str(value)
    raise ValueError(
        f"expected {f.expected} on one line, of at most {MAX_TEXT} characters, got {shown(value)}"
    )


def _coerce_path(f: Field, value: Any) -> str:
    text = _coerce_str(f, value)
    if not text.strip():  # a folder named by blanks alone is a slip, never a wish
        raise ValueError(f"expected {f.expected}, got {shown(value)}, which is only blanks")
    return text


def _coerce_name(f: Field, value: Any) -> str:
    # a series' folder name: the rule the store checks, so the two cannot disagree
    if not isinstance(value, str) or SERIES_RE.fullmatch(value) is None:
        raise ValueError(f"expected {f.expected}, got {shown(value)}")
    return value


def _coerce_enum(f: Field, value: Any) -> str:
    if not isinstance(value, str) or value not in f.choices:  # its choices are its bound
        raise ValueError(f"expected {f.expected}, got {shown(value)}")
    return value


def _coerce_endpoint(f: Field, value: Any) -> str:
    text = _coerce_str(f, value).strip()
    match = _ENDPOINT_RE.fullmatch(text)
    if match is None or (match.group(3) and not 0 <= int(match.group(3)) < 65536):
        raise ValueError(
            f"expected HOST:PORT with a port from 0 (a free one, as torchrun) to 65535, "
            f"got {value!r}"
        )
    return text


def _coerce_gpu_ids(f: Field, value: Any) -> str | list[int]:
    given = value
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    if isinstance(value, str):  # "0,1" or "[0, 1]", as a flag or a variable gives it
        value = [p for p in value.strip().strip("[]").split(",") if p.strip()]
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    try:
        ids = [_int(v) for v in value] if isinstance(value, list) and value else None
    except ValueError:
        ids = None
    bad = ids is None or any(not 0 <= i <= MAX_GPU_INDEX for i in ids)
    if bad or ids is None or len(set(ids)) != len(ids):
        raise ValueError(f"expected {f.expected} (0 to {MAX_GPU_INDEX}), got {shown(given)}")
    return ids


def _coerce_env(f: Field, value: Any) -> dict[str, str]:
    # Never a value in these messages, only its kind: a variable's value may be a secret.
    if not isinstance(value, dict):
        raise ValueError(f"expected {f.expected}, got {_kind(value)}")
    if len(value) > MAX_ENV_VARS:
        raise ValueError(f"expected {f.expected} (at most {MAX_ENV_VARS}), got {len(value)}")
    out: dict[str, str] = {}
    for name, val in value.items():
        if not isinstance(name, str) or _ENV_NAME_RE.fullmatch(name) is None or len(name) > 255:
            raise ValueError(f"invalid environment variable name {shown(name)}")
        # JSON's 1e400 is inf: a value no one meant, refused as YAML's .inf is elsewhere
        finite = not isinstance(val, float) or math.isfinite(val)
        if isinstance(val, bool) or not isinstance(val, (str, int, float)) or not finite:
            raise ValueError(f"value of {name} must be a string, got {_kind(val)}")
        text = str(val)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_ENV_VALUE or "\0" in text:
            raise ValueError(f"value of {name} is longer than {MAX_ENV_VALUE} bytes or has NUL")
        out[name] = text
    return out


def _parse_env_pairs(text: str) -> dict[str, str]:
    if text.startswith("{"):
        import json

        twice: list[str] = []  # a name json.loads would let the last of win
        try:
            loaded = json.loads(text, object_pairs_hook=lambda items: _once(items, twice))
        except (ValueError, RecursionError):  # 2000 nested brackets exceed the parser's stack
            loaded = _yaml_mapping(text)  # the file's own form: {NCCL_DEBUG: WARN}
        if twice:
            raise ValueError(_twice(twice[0]))
        return loaded if isinstance(loaded, dict) else {}
    pairs: dict[str, str] = {}
    parts = [p for p in (p.strip() for p in text.split(",")) if p]
    for i, part in enumerate(parts, 1):
        name, sep, val = part.partition("=")
        if not sep:  # never quoted: after a comma in a value, it is the rest of that value
            raise ValueError(
                f"expected KEY=VALUE,KEY=VALUE, but part {i} of {len(parts)} has no '=' "
                '(a value with a comma takes the JSON form: {"NAME": "a,b"})'
            )
        if name.strip() in pairs:
            raise ValueError(_twice(name.strip()))
        pairs[name.strip()] = val
    return pairs


def _twice(name: str) -> str:
    return f"{name} is given twice; give each variable once"


def _once(items: list[tuple[str, Any]], twice: list[str]) -> dict[str, Any]:
    """``items`` as a dict, each name given more than once noted in ``twice`` (silently,
    the last one would win: ``A=1,A=2`` is a slip more often than a wish)."""
    pairs: dict[str, Any] = {}
    for name, value in items:
        if name in pairs:
            twice.append(name)
        pairs[name] = value
    return pairs


def _yaml_mapping(text: str) -> Any:
    """``{NAME: value}`` as the project file reads it (YAML 1.2 scalars, bounded)."""
    from accel.config._yamlparse import unprintable
    from accel.config.yamlio import load_yaml_text
    from accel.errors import ConfigError

    found = unprintable(text)
    if found is not None:  # it names the character, never the text: it can be shown
        raise ValueError(found[1])
    try:
        return load_yaml_text(text, "the value").data
    except ConfigError:  # its message may quote the text, a secret's value among it
        raise ValueError(
            "expected a JSON object, a YAML mapping ({NAME: value}) or KEY=VALUE,KEY=VALUE"
        ) from None


def _kind(value: Any) -> str:
    """What ``value`` is, for a message that must not quote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "a number that is not finite"
    kinds = {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number"}
    return next((k for t, k in kinds.items() if isinstance(value, t)), type(value).__name__)


def _coerce_names(f: Field, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [p.strip() for p in value.strip().strip("[]").split(",") if p.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected {f.expected}, got {shown(value)}")
    if len(value) > MAX_NAMES:
        raise ValueError(f"expected {f.expected} (at most {MAX_NAMES}), got {len(value)}")
    if f.choices:
        unknown = [v for v in value if v not in f.choices]
    else:  # free names (class names): identifiers, so they can name nothing else
        unknown = [v for v in value if not _IDENTIFIER_RE.fullmatch(v) or len(v) > 255]
    if unknown:
        raise ValueError(f"expected {f.expected}, got {shown(unknown[0])}")
    return list(dict.fromkeys(value))


def _coerce_size(f: Field, value: Any) -> int:
    try:
        return parse_size(value)
    except UsageError:
        raise ValueError(f"expected {f.expected}, got {value!r}") from None


def _coerce_duration(f: Field, value: Any) -> float:
    limit = f.maximum if f.maximum is not None else 0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # 1e999 is inf, .nan compares false, a 400-digit int overflows float(): all refused
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected {f.expected}, got {shown(value)}")
        if 0 <= value <= limit:
            return float(value)
        raise ValueError(f"expected {f.expected}, got {shown(value)}")
    if not isinstance(value, str):
        raise ValueError(f"expected {f.expected}, got {shown(value)}")
    if re.fullmatch(r"[0-9]{1,20}(\.[0-9]{1,20})?", value.strip()):  # typed: the unit is said
        raise ValueError(
            f"expected {f.expected}, got {value.strip()!r}: add a unit ({value.strip()}s)"
        )
    try:
        return parse_duration(value)
    except UsageError:
        said = duration_hint(value.strip())
        raise ValueError(f"expected {f.expected}, got {shown(value)}{said}") from None


_COERCE = {
    "int": _coerce_int,
    "int_or_auto": _coerce_int_or_auto,
    "bool": _coerce_bool,
    "str": _coerce_str,
    "name": _coerce_name,
    "enum": _coerce_enum,
    "endpoint": _coerce_endpoint,
    "gpu_ids": _coerce_gpu_ids,
    "env": _coerce_env,
    "size": _coerce_size,
    "duration": _coerce_duration,
    "path": _coerce_path,
    "names": _coerce_names,
}
