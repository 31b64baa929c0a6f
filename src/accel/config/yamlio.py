"""Strict, safe YAML reading for configuration files.

- SafeLoader only: no tag builds an object.
- YAML 1.2 core scalars: ``no``/``on`` stay strings, ``1:20`` is not sexagesimal 80,
  ``2024-01-01`` is not a date;
  the typed schema then catches what was meant.
- Duplicate keys are an error, not last-wins.
- Alias expansion is bounded by counting the nodes visited (no billion laughs), an alias
  inside its own anchor (``a: &x [*x]``) is refused, and keys are scalars.
- Nesting is bounded (``MAX_DEPTH``) before anything is built, and again as aliases
  expand, and a number has at most ``MAX_DIGITS`` digits: a hostile file is one clear
  error, never a RecursionError.
- Every key of the result carries its line number for error messages.

The parser and those bounds live in :mod:`accel.config._yamlparse`, imported with the
first document: a command in a project without a config file never imports yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel._fs import read_regular
from accel.errors import ConfigError, DamagedFile

MAX_FILE_BYTES = 16 << 20  # a config of keys and values: a larger file is not one


@dataclass
class LoadedYaml:
    """A parsed document and the line (1-based) of each dotted key in it."""

    data: Any
    lines: dict[str, int] = field(default_factory=dict)


def load_yaml_text(text: str, source: str) -> LoadedYaml:
    from accel.config._yamlparse import parse  # yaml only once there is a document

    data, lines = parse(text, source)
    return LoadedYaml(data, lines)


def read_config_text(path: Path) -> str:
    """The text of the config file at ``path``: a regular file (a link to one is fine:
    dotfile managers make them), never waited on like a FIFO, at most
    :data:`MAX_FILE_BYTES`. FileNotFoundError when there is none, ConfigError otherwise."""
    try:
        raw = read_regular(path, MAX_FILE_BYTES, follow=True)
    except DamagedFile as exc:
        raise ConfigError(f"{path}: {exc.why}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save it as UTF-8") from None


def load_yaml_file(path: Path) -> LoadedYaml:
    try:
        text = read_config_text(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    return load_yaml_text(text, str(path))
