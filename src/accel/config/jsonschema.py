"""The configuration schema as a JSON Schema (draft 2020-12), for editors."""

from __future__ import annotations

from typing import Any

from accel.config.fields import FIELDS, SCHEMA_VERSION, Field


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
