"""Changes to the project file: write, set, unset, import. Each is a locked
read-modify-write so two concurrent ``accel config set`` never lose an update.

The functions take the workspace as a :class:`ProjectFiles`: the few things of it they
use. The config sits below the workspace (which reads it), so it never imports it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from accel._locks import locked
from accel.config import schema
from accel.config.edit import (
    checked,
    dump,
    render_value,
    rewrite,
    same_newlines,
    set_in_text,
    unset_in_text,
    write_config,
)
from accel.config.hf_import import ImportResult, map_hf_config
from accel.config.resolve import flag_value, validate_document
from accel.config.yamlio import load_yaml_file, load_yaml_text, read_config_text
from accel.errors import ConfigError
from accel.layout import CONFIG_LOCK


class ProjectFiles(Protocol):
    """What editing the project file needs of a workspace (:class:`accel.Workspace`)."""

    @property
    def config_file(self) -> Path: ...

    @property
    def lock_timeout(self) -> float: ...

    def lock_path(self, name: str) -> Path: ...

    def ensure_root(self) -> ProjectFiles: ...

    def check_data_path(self, value: str | None) -> None: ...

    def ensure_gitignore(self) -> None: ...


@contextlib.contextmanager
def _editing(ws: ProjectFiles, mending: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Under the config lock: (the file's text, its values). ``mending``: the key the
    edit replaces, whose own bad value (a hand edit: ``num_processes: many``) is left
    out of the values instead of refused; any other key's error is still raised."""
    ws.ensure_root()
    with locked(ws.lock_path(CONFIG_LOCK), ws.lock_timeout):
        path = ws.config_file
        text = _text_or_empty(path)
        values: dict[str, Any] = {}
        if text.strip():
            loaded = load_yaml_text(text, str(path))  # the text read: the file is read once
            errors: list[ConfigError] | None = None if mending is None else []
            values, _ = validate_document(loaded, str(path), refused=errors)
            others = [e for e in errors or () if e.key != mending]
            if others:
                raise others[0]
        else:
            text = dump({})
        yield text, values


def _text_or_empty(path: Path) -> str:
    try:
        return read_config_text(path)
    except FileNotFoundError:
        return ""


def exists(ws: ProjectFiles) -> bool:
    """Whether the project has a config file of its own (else the defaults apply)."""
    return ws.config_file.exists()


def write(ws: ProjectFiles, values: dict[str, Any]) -> Path:
    """Write a fresh project file holding ``values`` (flat keys, already validated)."""
    ws.ensure_root().ensure_gitignore()
    with locked(ws.lock_path(CONFIG_LOCK), ws.lock_timeout):
        rewrite(ws.config_file, "", dump(values), values)
    return ws.config_file


def plan_edit(ws: ProjectFiles, values: dict[str, Any]) -> tuple[str, str]:
    """(the project file now, the file with ``values`` set): comments, key order and every
    other key kept. Nothing is written (see :func:`write_edit`)."""
    path = ws.config_file
    before = _text_or_empty(path)
    current: dict[str, Any] = {}
    if before.strip():
        current, _ = validate_document(load_yaml_file(path), str(path))
    edited = before if before.strip() else dump({})
    for key, value in values.items():
        edited = set_in_text(edited, key, render_value(schema.BY_KEY[key], value))
    return before, same_newlines(before, checked(path, edited, {**current, **values}))


def write_edit(ws: ProjectFiles, before: str, after: str) -> Path:
    """Write what :func:`plan_edit` planned, unless the file changed since it was read."""
    ws.ensure_root().ensure_gitignore()
    with locked(ws.lock_path(CONFIG_LOCK), ws.lock_timeout):
        path = ws.config_file
        now = _text_or_empty(path)
        if now != before:
            raise ConfigError(f"{path} changed while you answered; nothing written, run again")
        write_config(path, after)
    return path


def set_value(ws: ProjectFiles, key: str, text: str) -> Any:
    """Set ``key`` to ``text`` (read as the file reads a value); ``launch.env.NAME`` sets
    one variable and keeps the others. Returns the value set."""
    found = schema.entry(key)
    if found is not None:
        return _set_entry(ws, key, *found, text)
    f = schema.field(key)
    value = flag_value(f.key, text, named=f.key)
    if f.key == "workspace.path":  # a folder of someone else's would lock every command out
        ws.check_data_path(value)
    with _editing(ws, mending=f.key) as (current, values):
        values[f.key] = value
        edited = set_in_text(current, f.key, render_value(f, value, text))
        rewrite(ws.config_file, current, edited, values)
    return value


def _set_entry(ws: ProjectFiles, key: str, f: schema.Field, name: str, text: str) -> str:
    with _editing(ws) as (current, values):
        merged = flag_value(f.key, {**values.get(f.key, {}), name: text}, named=key)
        values[f.key] = merged
        edited = set_in_text(current, f.key, render_value(f, merged))
        rewrite(ws.config_file, current, edited, values)
    return str(merged[name])


def unset_value(ws: ProjectFiles, key: str) -> bool:
    """Remove ``key`` from the project file; False when it was not set there.
    ``launch.env.NAME`` removes that one variable (the key goes with its last one).

    A file that is invalid because of that very key (an unknown key, a bad value) is
    repaired this way: the one line goes, nothing else is touched.
    """
    found = schema.entry(key)
    if found is not None:
        return _unset_entry(ws, *found)
    if not exists(ws):  # nothing to remove: no workspace is made to say so
        schema.field(key)  # an unknown key is still refused as one
        return False
    try:
        with _editing(ws) as (current, values):
            f = schema.field(key)
            if f.key not in values:
                return False
            del values[f.key]
            rewrite(ws.config_file, current, unset_in_text(current, f.key), values)
        return True
    except ConfigError as exc:
        if exc.key != key:
            raise
        return _remove_broken_key(ws, key)


def _unset_entry(ws: ProjectFiles, f: schema.Field, name: str) -> bool:
    if not exists(ws):
        return False
    with _editing(ws) as (current, values):
        left = dict(values.get(f.key, {}))
        if left.pop(name, None) is None:
            return False
        if left:
            values[f.key] = left
            edited = set_in_text(current, f.key, render_value(f, left))
        else:
            del values[f.key]
            edited = unset_in_text(current, f.key)
        rewrite(ws.config_file, current, edited, values)
    return True


def _remove_broken_key(ws: ProjectFiles, key: str) -> bool:
    with locked(ws.lock_path(CONFIG_LOCK), ws.lock_timeout):
        current = read_config_text(ws.config_file)
        edited = unset_in_text(current, key)
        if edited == current:
            return False
        write_config(ws.config_file, edited)
    return True


def read_hf(source: Path) -> ImportResult:
    """What a Hugging Face Accelerate config file means for accel (ConfigError if nothing)."""
    if not source.is_file():  # a folder, a FIFO: named as `validate` names it
        raise ConfigError(
            f"{source}: {'not a regular file' if source.exists() else 'no such file'}"
        )
    loaded = load_yaml_file(source)
    if not isinstance(loaded.data, dict):
        raise ConfigError(f"{source}: not a Hugging Face Accelerate config (expected a mapping)")
    return map_hf_config(loaded.data, str(source))


def import_hf(ws: ProjectFiles, source: Path) -> ImportResult:
    """Write what ``source`` means into the project file; a refused file changes nothing."""
    result = read_hf(source)
    with _editing(ws) as (current, values):
        edited = current
        for key, value in result.values.items():
            if key == "launch.env":  # the file's variables join the project's own
                value = {**values.get(key, {}), **value}
            if value is None:
                values.pop(key, None)
                edited = unset_in_text(edited, key)
                continue
            values[key] = value
            edited = set_in_text(edited, key, render_value(schema.BY_KEY[key], value))
        rewrite(ws.config_file, current, edited, values)
    return result
