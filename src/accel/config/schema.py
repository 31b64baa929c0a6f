"""The configuration schema: every key, its type, default, bounds and documentation.

The interface the rest of accel uses; the parts live in their own modules:

- :mod:`accel.config.fields`: the table of keys (:data:`FIELDS`, :class:`Field`).
- :mod:`accel.config.coerce`: ``coerce(field, value)`` checks a value read from YAML;
  ``parse_text(field, text)`` reads one from an environment variable or a flag. Both
  raise :class:`ValueError` with what was expected; callers add file, line and key.
- :mod:`accel.config.jsonschema`: the JSON Schema of the project file, for editors.

Here: looking a key up (with a suggestion for a misspelt one), showing a value as a
person would write it, and the defaults.
"""

from __future__ import annotations

import difflib
from typing import Any

from accel.config.coerce import coerce, parse_text, read_value
from accel.config.fields import BY_KEY, FIELDS, SCHEMA_VERSION, SECTIONS, Field
from accel.config.jsonschema import json_schema
from accel.errors import ConfigError, UsageError
from accel.units import duration_text, size_text

__all__ = [
    "BY_KEY",
    "FIELDS",
    "SCHEMA_VERSION",
    "SECTIONS",
    "Field",
    "coerce",
    "defaults",
    "display",
    "entry",
    "field",
    "imported",
    "json_schema",
    "parse_text",
    "read_value",
    "suggest",
]


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


def entry(key: str) -> tuple[Field, str] | None:
    """``launch.env.NAME``: the mapping's field and ``NAME``, one variable of it that
    ``config get/set/unset`` take alone (the name is checked where the mapping is); None
    for any other key."""
    for f in FIELDS:
        if f.kind == "env" and key.startswith(f.key + "."):
            return f, key[len(f.key) + 1 :]
    return None


# The names other launchers and trainers give accel's keys (torchrun's flags, the
# environment torchrun reads, Hugging Face Trainer's arguments): spelled nothing like
# accel's, they are suggested by meaning rather than by letters.
ALIASES = {
    "nproc_per_node": "launch.num_processes",
    "nproc": "launch.num_processes",
    "nprocs": "launch.num_processes",
    "num_gpus": "launch.num_processes",
    "nnodes": "launch.num_machines",
    "num_nodes": "launch.num_machines",
    "node_rank": "launch.machine_rank",
    "master_addr": "launch.rdzv_endpoint",
    "master_port": "launch.rdzv_endpoint",
    "main_process_ip": "launch.rdzv_endpoint",
    "main_process_port": "launch.rdzv_endpoint",
    "rdzv_backend": "launch.rdzv_endpoint",
    "cpu": "launch.use_cpu",
    "no_cuda": "launch.use_cpu",
    "use_cpu_only": "launch.use_cpu",
    "fp16": "launch.mixed_precision",
    "bf16": "launch.mixed_precision",
    "precision": "launch.mixed_precision",
    "save_total_limit": "checkpoints.keep_last",
    "max_checkpoints": "checkpoints.keep_last",
}


def suggest(key: str) -> str:
    alias = ALIASES.get(key.rsplit(".", 1)[-1].replace("-", "_").lower())
    if alias is not None:
        return f"; did you mean {alias!r}?"
    names = [f.key for f in FIELDS] + [f.key.split(".", 1)[1] for f in FIELDS]
    names += [] if "." in key else list(SECTIONS)  # `launch.1` wants a key, not `launch`
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if not close:
        return " (see `accel config schema` for the valid keys)"
    match = close[0]
    if match not in BY_KEY and match not in SECTIONS:
        match = next(f.key for f in FIELDS if f.key.endswith("." + match))
    return f"; did you mean {match!r}?"


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


def imported(key: str, value: Any, where: str) -> Any:
    """``value`` read from another tool's file as ``key``; ConfigError naming ``where``
    (``"hf.yaml: fsdp_config.fsdp_min_num_params"``) when it does not fit."""
    try:
        return read_value(BY_KEY[key], value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
