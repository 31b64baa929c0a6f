"""The configuration schema: every key, its type, default, bounds and documentation.

Pure data and pure functions. ``coerce(field, value)`` checks a value read from YAML;
``parse_text(field, text)`` reads one from an environment variable or a flag. Both
raise :class:`ValueError` with what was expected; callers add file, line and key.

Validation is total: every number has an upper bound (a 400-digit ``lock_timeout``,
``1e999`` or ``.nan`` is refused, never passed on to crash a later command), and so
does every string and list (an environment value the kernel could not pass on, a
list of a million GPU indices).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any

from accel.errors import UsageError
from accel.units import (
    DURATION_HELP,
    SIZE_HELP,
    duration_text,
    parse_duration,
    parse_size,
    size_text,
)

SCHEMA_VERSION = 1

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_IDENTIFIER_RE = _ENV_NAME_RE  # a Python class name
_ENDPOINT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:([0-9]{1,5}))?", re.ASCII)
HOUR, DAY = 3600.0, 86400.0
MAX_TEXT = 4096  # a string value: a path, an id, a backend name
MAX_ENV_VALUE = 131071  # the kernel refuses a longer environment string (MAX_ARG_STRLEN)
MAX_ENV_VARS = 1000
MAX_GPU_INDEX = 1023
MAX_NAMES = 1000


@dataclass(frozen=True)
class Field:
    """One configuration key. ``kind`` is one of the ``_COERCE`` names below."""

    key: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None  # every number has one: see docs/configuration.md
    nullable: bool = False

    @property
    def env_var(self) -> str:
        return "ACCEL_" + self.key.replace(".", "_").upper()

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def expected(self) -> str:
        text = _EXPECTED[self.kind]
        if self.choices and self.kind == "names":
            text = "a list of names from " + ", ".join(self.choices)
        elif self.choices:
            text = "one of " + ", ".join(self.choices)
        if self.kind in ("int", "int_or_auto") and self.maximum is not None:
            text = text.replace("an integer", f"an integer {self.bounds}")
        elif self.kind in ("duration", "size") and self.maximum is not None:
            text += f" ({self.bounds})"
        return text + (" or null" if self.nullable else "")

    @property
    def bounds(self) -> str:
        """The range of a number, for people: ``from 1 to 1024``, ``at most 1h``."""
        if self.maximum is None:
            return ""
        if self.kind not in ("duration", "size"):
            return f"from {int(self.minimum or 0)} to {int(self.maximum)}"
        high = _format(self, self.maximum)
        return (
            f"from {_format(self, self.minimum)} to {high}" if self.minimum else f"at most {high}"
        )


def _format(f: Field, value: float | None) -> str:
    from accel.units import format_duration

    number = value or 0
    if f.kind == "duration":
        return format_duration(number)
    if number >= 2**63 - 1:
        return "8 EiB"  # what a signed 64-bit byte count holds
    unit, name = next((u, n) for u, n in _BINARY if number % u == 0)
    return f"{int(number) // unit} {name}"


_BINARY = ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"), (1, "B"))


FIELDS: tuple[Field, ...] = (
    Field(
        "launch.num_processes",
        "int_or_auto",
        1,
        "Worker processes per machine; `auto` = one per visible GPU, else 1.",
        minimum=1,
        maximum=1024,
    ),
    Field(
        "launch.num_machines", "int", 1, "Machines (nodes) in the job.", minimum=1, maximum=65536
    ),
    Field(
        "launch.machine_rank",
        "int",
        0,
        "This machine's rank among num_machines.",
        minimum=0,
        maximum=65535,
    ),
    Field(
        "launch.rdzv_endpoint",
        "endpoint",
        None,
        "HOST:PORT of the c10d rendezvous for multi-node jobs.",
        nullable=True,
    ),
    Field(
        "launch.rdzv_id", "str", None, "Rendezvous id shared by all nodes of a job.", nullable=True
    ),
    Field(
        "launch.max_restarts",
        "int",
        0,
        "Restarts of the workers after a failure.",
        minimum=0,
        maximum=10000,
    ),
    Field(
        "launch.mixed_precision",
        "enum",
        "no",
        "Autocast precision for the workers.",
        choices=("no", "fp16", "bf16"),
    ),
    Field("launch.use_cpu", "bool", False, "Run on the CPU even when GPUs are present."),
    Field(
        "launch.gpu_ids",
        "gpu_ids",
        "all",
        "GPUs to use: `all` or a list of device indices such as [0, 1].",
    ),
    Field("launch.env", "env", {}, "Extra environment variables for every worker."),
    Field(
        "launch.run_name",
        "name",
        "default",
        "Name of the run series; checkpoints are kept per series.",
    ),
    Field(
        "launch.dynamo_backend",
        "str",
        "no",
        "torch.compile backend exported as ACCELERATE_DYNAMO_BACKEND (`no` = off).",
    ),
    Field(
        "launch.fsdp",
        "bool",
        False,
        "Shard models with FSDP2 (fully_shard) in Accelerator.prepare(); exported as "
        "ACCELERATE_USE_FSDP.",
    ),
    Field(
        "launch.fsdp_wrap",
        "enum",
        "transformer",
        "Modules FSDP shards one by one before the root: `transformer` (each layer of "
        "fsdp_layer_classes), `size` (fsdp_min_params), `none` (the root only).",
        choices=("transformer", "size", "none"),
    ),
    Field(
        "launch.fsdp_layer_classes",
        "names",
        [],
        "Class names of the layers fsdp_wrap `transformer` shards; empty: the model's "
        "_no_split_modules, else every module of an nn.ModuleList.",
    ),
    Field(
        "launch.fsdp_min_params",
        "int",
        100_000_000,
        "fsdp_wrap `size`: shard each module holding this many parameters (0: the root only).",
        maximum=10**15,
    ),
    Field(
        "launch.fsdp_reshard_after_forward",
        "bool",
        True,
        "Free the gathered parameters after forward (less memory, one more all-gather).",
    ),
    Field(
        "launch.stop_grace_period",
        "duration",
        10.0,
        "How long workers get after SIGTERM before they are killed.",
        maximum=HOUR,
    ),
    Field(
        "launch.hang_timeout",
        "duration",
        None,
        "Declare the run hung when no rank printed, logged a metric or beat for this long.",
        maximum=30 * DAY,
        nullable=True,
    ),
    Field(
        "launch.hang_action",
        "enum",
        "warn",
        "On a hang: dump stacks and `warn`, or also `kill` the workers like a failure.",
        choices=("warn", "kill"),
    ),
    Field(
        "checkpoints.keep_last",
        "int",
        3,
        "Committed checkpoints kept per series; null keeps all.",
        minimum=1,
        maximum=1_000_000,
        nullable=True,
    ),
    Field(
        "checkpoints.async_save",
        "bool",
        False,
        "Write checkpoints in the background after a snapshot to CPU memory.",
    ),
    Field(
        "checkpoints.collective_timeout",
        "duration",
        300.0,
        "How long a rank waits for the others inside save_state/load_state before failing.",
        maximum=DAY,
    ),
    Field(
        "checkpoints.arrival_timeout",
        "duration",
        60.0,
        "How long save_state/load_state wait for every rank to call them before failing "
        "(a rank that never calls them: `if is_main_process: save_state()`).",
        maximum=DAY,
    ),
    Field(
        "cache.max_size",
        "size",
        None,
        "Size budget of the workspace; least recently used entries are evicted.",
        maximum=2**63 - 1,
        nullable=True,
    ),
    Field(
        "cache.framework_caches",
        "names",
        ["inductor", "triton"],
        "Framework caches `accel launch` keeps in cache/frameworks/ (inductor, triton, hf, "
        "torch_hub); a variable the user already set wins.",
        choices=("inductor", "triton", "hf", "torch_hub"),
    ),
    Field(
        "logs.level",
        "enum",
        "info",
        "Level of logs/training.log.",
        choices=("debug", "info", "warning", "error"),
    ),
    Field(
        "logs.rotate_max_bytes",
        "size",
        10 * 1024**2,
        "Size at which logs/training.log rotates.",
        maximum=1024**4,
    ),
    Field(
        "logs.backup_count", "int", 5, "Rotated training.log files kept.", minimum=0, maximum=1000
    ),
    Field(
        "logs.resource_interval",
        "duration",
        10.0,
        "How often the launcher samples CPU, memory and GPU use into resources.jsonl.",
        minimum=0.1,
        maximum=DAY,
    ),
    Field(
        "logs.on_nonfinite",
        "enum",
        "warn",
        "When a logged metric becomes NaN or infinite: `warn` once per metric, or `stop` "
        "the run (exit 1).",
        choices=("warn", "stop"),
    ),
    Field(
        "store.lock_timeout",
        "duration",
        60.0,
        "How long to wait for a workspace lock before giving up.",
        maximum=DAY,
    ),
    Field(
        "workspace.path",
        "path",
        None,
        "Keep the workspace data (cache, checkpoints, logs, state) in this folder.",
        nullable=True,
    ),
)

BY_KEY: dict[str, Field] = {f.key: f for f in FIELDS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(f.section for f in FIELDS))

_EXPECTED = {
    "int": "an integer",
    "int_or_auto": "an integer or 'auto'",
    "bool": "true or false",
    "str": "a string",
    "name": "a name of letters, digits, '.', '_' or '-'",
    "enum": "one of the allowed values",
    "endpoint": "HOST:PORT",
    "gpu_ids": "'all' or a list of GPU indices like [0, 1]",
    "env": "a mapping of environment variable names to strings",
    "size": SIZE_HELP,
    "duration": DURATION_HELP,
    "path": "a folder path",
    "names": "a list of names (Python identifiers)",
}


def field(key: str) -> Field:
    """The field for ``key``, or a :class:`UsageError` that suggests the closest key."""
    try:
        return BY_KEY[key]
    except KeyError:
        if key in SECTIONS:
            example = next(f.key for f in FIELDS if f.section == key)
            raise UsageError(
                f"{key!r} is a section, not a key: name one of its keys, e.g. {example!r} "
                "(`accel config show` lists them)"
            ) from None
        raise UsageError(f"unknown config key {key!r}{suggest(key)}") from None


def suggest(key: str) -> str:
    names = [f.key for f in FIELDS] + [f.key.split(".", 1)[1] for f in FIELDS] + list(SECTIONS)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if not close:
        return " (see `accel config schema` for the valid keys)"
    match = close[0]
    if match not in BY_KEY and match not in SECTIONS:
        match = next(f.key for f in FIELDS if f.key.endswith("." + match))
    return f"; did you mean {match!r}?"


def coerce(f: Field, value: Any) -> Any:
    """Check a YAML value against ``f``; returns the normalised value or raises ValueError."""
    if value is None:
        if f.nullable:
            return None
        raise ValueError(f"expected {f.expected}, got null")
    result = _COERCE[f.kind](f, value)
    if f.choices and f.kind != "names" and result not in f.choices:
        raise ValueError(f"expected {f.expected}, got {_shown(value)}")
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        low = f.minimum if f.minimum is not None else 0
        # An int is compared as an int: float() of a 400-digit number would overflow.
        if not low <= result <= (f.maximum if f.maximum is not None else result):
            raise ValueError(f"expected {f.expected}, got {_shown(value)}")
    return result


def _shown(value: Any) -> str:
    """``value`` for an error message, cut short: a 400-digit number is not one line."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


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
    if f.kind == "gpu_ids" and stripped.lower() != "all":
        return coerce(f, [_int(p.strip()) for p in stripped.strip("[]").split(",") if p.strip()])
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
        raise ValueError(f"expected {f.expected}, got {_shown(value)}") from None


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
    if isinstance(value, str) and value and "\0" not in value and len(value) <= MAX_TEXT:
        return value
    raise ValueError(f"expected {f.expected} of at most {MAX_TEXT} characters, got {_shown(value)}")


def _coerce_name(f: Field, value: Any) -> str:
    text = _coerce_str(f, value)
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", text, re.ASCII) is None:
        raise ValueError(f"expected {f.expected}, got {value!r}")
    return text


def _coerce_endpoint(f: Field, value: Any) -> str:
    text = _coerce_str(f, value).strip()
    match = _ENDPOINT_RE.fullmatch(text)
    if match is None or (match.group(3) and not 0 < int(match.group(3)) < 65536):
        raise ValueError(f"expected HOST:PORT with a port from 1 to 65535, got {value!r}")
    return text


def _coerce_gpu_ids(f: Field, value: Any) -> str | list[int]:
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    if isinstance(value, str):
        value = [p for p in value.split(",") if p.strip()]
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    try:
        ids = [_int(v) for v in value] if isinstance(value, list) and value else None
    except ValueError:
        ids = None
    bad = ids is None or any(not 0 <= i <= MAX_GPU_INDEX for i in ids)
    if bad or ids is None or len(set(ids)) != len(ids):
        raise ValueError(f"expected {f.expected} (0 to {MAX_GPU_INDEX}), got {_shown(value)}")
    return ids


def _coerce_env(f: Field, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > MAX_ENV_VARS:
        raise ValueError(f"expected {f.expected} (at most {MAX_ENV_VARS}), got {_shown(value)}")
    out: dict[str, str] = {}
    for name, val in value.items():
        if not isinstance(name, str) or _ENV_NAME_RE.fullmatch(name) is None or len(name) > 255:
            raise ValueError(f"invalid environment variable name {_shown(name)}")
        if isinstance(val, bool) or not isinstance(val, (str, int, float)):
            raise ValueError(f"value of {name} must be a string, got {_shown(val)}")
        text = str(val)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_ENV_VALUE or "\0" in text:
            raise ValueError(f"value of {name} is longer than {MAX_ENV_VALUE} bytes or has NUL")
        out[name] = text
    return out


def _parse_env_pairs(text: str) -> dict[str, str]:
    if text.startswith("{"):
        import json

        try:
            loaded = json.loads(text)
        except ValueError:
            raise ValueError("expected a JSON object or KEY=VALUE,KEY=VALUE") from None
        return loaded if isinstance(loaded, dict) else {}
    pairs = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, val = part.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {part!r}")
        pairs[name.strip()] = val
    return pairs


def _coerce_names(f: Field, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [p.strip() for p in value.strip().strip("[]").split(",") if p.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected {f.expected}, got {_shown(value)}")
    if len(value) > MAX_NAMES:
        raise ValueError(f"expected {f.expected} (at most {MAX_NAMES}), got {len(value)}")
    if f.choices:
        unknown = [v for v in value if v not in f.choices]
    else:  # free names (class names): identifiers, so they can name nothing else
        unknown = [v for v in value if not _IDENTIFIER_RE.fullmatch(v) or len(v) > 255]
    if unknown:
        raise ValueError(f"expected {f.expected}, got {_shown(unknown[0])}")
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
            raise ValueError(f"expected {f.expected}, got {_shown(value)}")
        if 0 <= value <= limit:
            return float(value)
        raise ValueError(f"expected {f.expected}, got {_shown(value)}")
    if not isinstance(value, str):
        raise ValueError(f"expected {f.expected}, got {_shown(value)}")
    try:
        return parse_duration(value)
    except UsageError:
        raise ValueError(f"expected {f.expected}, got {_shown(value)}") from None


_COERCE = {
    "int": _coerce_int,
    "int_or_auto": _coerce_int_or_auto,
    "bool": _coerce_bool,
    "str": _coerce_str,
    "name": _coerce_name,
    "enum": _coerce_str,
    "endpoint": _coerce_endpoint,
    "gpu_ids": _coerce_gpu_ids,
    "env": _coerce_env,
    "size": _coerce_size,
    "duration": _coerce_duration,
    "path": _coerce_str,
    "names": _coerce_names,
}


def display(key: str, value: Any) -> str:
    """A value as a person would write it in the config: ``10s``, ``10MiB``, ``false``, ``null``."""
    import json

    f = BY_KEY.get(key)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if f is not None and f.kind == "duration" and isinstance(value, (int, float)):
        return duration_text(float(value))
    if f is not None and f.kind == "size" and isinstance(value, int):
        return size_text(value)
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def defaults() -> dict[str, Any]:
    return {f.key: f.default for f in FIELDS}


def json_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of the project file, for editors."""
    sections: dict[str, Any] = {}
    for f in FIELDS:
        sec = sections.setdefault(
            f.section, {"type": "object", "additionalProperties": False, "properties": {}}
        )
        sec["properties"][f.key.split(".", 1)[1]] = _json_type(f)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "accel configuration",
        "type": "object",
        "additionalProperties": False,
        "properties": {"version": {"const": SCHEMA_VERSION}, **sections},
    }


def _json_type(f: Field) -> dict[str, Any]:
    kinds: dict[str, dict[str, Any]] = {
        "int": {"type": "integer"},
        "int_or_auto": {"anyOf": [{"type": "integer"}, {"const": "auto"}]},
        "bool": {"type": "boolean"},
        "enum": {"enum": list(f.choices)},
        "gpu_ids": {"anyOf": [{"const": "all"}, {"type": "array", "items": {"type": "integer"}}]},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "size": {"type": ["string", "integer"]},
        "duration": {"type": ["string", "number"]},
        "names": {
            "type": "array",
            "items": (
                {"enum": list(f.choices)}
                if f.choices
                else {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}
            ),
            "uniqueItems": True,
        },
    }
    base = dict(kinds.get(f.kind, {"type": "string"}))
    if f.kind == "int" and f.maximum is not None:
        base["minimum"], base["maximum"] = int(f.minimum or 0), int(f.maximum)
    if f.nullable:
        base = {"anyOf": [base, {"type": "null"}]}
    base["description"] = f.help
    base["default"] = f.default
    return base
