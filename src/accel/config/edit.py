"""Edit the project file in place of a person: ``set`` and ``unset`` one key.

The file is edited as text so comments, blank lines and key order survive; the result
is parsed and validated before it is written atomically. When the file's shape is one
a text edit cannot handle safely (flow style, anchors), it is rewritten from its data
instead, which keeps the values but not the comments.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from accel._fs import atomic_write
from accel._redact import redact_text
from accel.config import schema
from accel.config.resolve import check_edit, validate_document
from accel.config.yamlio import load_yaml_text
from accel.errors import ConfigError

SECRET_MODE = 0o600  # a file holding secrets: readable by its owner only, whatever the umask
HEADER = "# accel project configuration: `accel config schema` documents every key.\n"


def render_value(f: schema.Field, value: Any, text: str | None = None) -> str:
    """The YAML for a value, keeping what the user typed for sizes and durations."""
    if text is not None and f.kind in ("size", "duration") and value is not None:
        value = text.strip()
    dumped = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6)
    return dumped.removesuffix("...\n").strip()


def set_in_text(text: str, key: str, rendered: str) -> str:
    section, name = key.split(".", 1)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start = _find_section(lines, section)
    if start is None:
        prefix = "" if not lines or lines[-1].strip() == "" else "\n"
        return "".join(lines) + f"{prefix}{section}:\n  {name}: {rendered}\n"
    end = _block_end(lines, start)
    indent = _indent_of(lines, start, end)
    found = _find_key(lines, start, end, name)
    new_line = f"{indent}{name}: {rendered}"
    if found is None:
        insert_at = _last_content(lines, start, end) + 1
        lines.insert(insert_at, new_line + "\n")
        return "".join(lines)
    first, last = found
    lines[first:last] = [new_line + _trailing_comment(lines[first]) + "\n"]
    return "".join(lines)


def unset_in_text(text: str, key: str) -> str:
    section, name = key.split(".", 1)
    lines = text.splitlines(keepends=True)
    start = _find_section(lines, section)
    if start is None:
        return text
    found = _find_key(lines, start, _block_end(lines, start), name)
    if found is None:
        return text
    del lines[found[0] : found[1]]
    return "".join(lines)


def _find_section(lines: list[str], section: str) -> int | None:
    pattern = re.compile(rf"^{re.escape(section)}:\s*(#.*)?$")
    return next((i for i, line in enumerate(lines) if pattern.match(line.rstrip("\n"))), None)


def _block_end(lines: list[str], start: int) -> int:
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line.lstrip().startswith("#") and not line[0].isspace():
            return i
    return len(lines)


def _indent_of(lines: list[str], start: int, end: int) -> str:
    for line in lines[start + 1 : end]:
        if line.strip() and not line.lstrip().startswith("#"):
            return line[: len(line) - len(line.lstrip())]
    return "  "


def _find_key(lines: list[str], start: int, end: int, name: str) -> tuple[int, int] | None:
    indent = _indent_of(lines, start, end)
    pattern = re.compile(rf"^{re.escape(indent)}{re.escape(name)}\s*:(\s|$)")
    for i in range(start + 1, end):
        if pattern.match(lines[i]):
            last = i + 1
            while last < end and (not lines[last].strip() or _depth(lines[last]) > len(indent)):
                last += 1
            while last > i + 1 and not lines[last - 1].strip():
                last -= 1
            return i, last
    return None


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def _last_content(lines: list[str], start: int, end: int) -> int:
    for i in range(end - 1, start, -1):
        # a comment at column 0 ending a section heads the next one: a key goes above it
        if lines[i].strip() and not lines[i].startswith("#"):
            return i
    return start


def _trailing_comment(line: str) -> str:
    match = re.search(r"\s+#[^'\"]*$", line.rstrip("\n"))
    return match.group(0) if match else ""


def rewrite(path: Path, text: str, edited: str, expected: dict[str, Any]) -> None:
    """Validate ``edited`` (falling back to a plain dump when the text edit went wrong)
    and write it atomically. ``expected`` is the flat value set the file must hold; the
    configuration it makes with the other layers is checked too (:func:`check_edit`)."""
    check_edit(path, expected, os.environ)
    write_config(path, same_newlines(text, checked(path, edited, expected)))


def same_newlines(text: str, edited: str) -> str:
    """``edited`` with the line ends of ``text``: a file whose every line ends in CRLF (a
    Windows editor's, checked in as it is) keeps them, not a mix with the new lines'."""
    if "\n" in text and text.count("\r\n") == text.count("\n"):
        return re.sub(r"(?<!\r)\n", "\r\n", edited)
    return edited


def write_config(path: Path, text: str) -> None:
    """Write the project file atomically. A file that holds a secret by design (anything
    accel hides when it shows the file: a secret-named ``launch.env`` variable, a URL's
    password) is written 0600; any other keeps the mode it has (a new one: the umask's).
    A link (dotfile managers make them) stays a link: the file it names is rewritten."""
    if path.is_symlink():  # a dotfile manager's link: the file it names is the config
        link, path = path, Path(os.path.realpath(path))
        if not path.parent.is_dir():  # a disk not mounted, a dotfiles folder moved away
            raise ConfigError(
                f"{link} is a link to {path}, in a folder that does not exist: make that "
                "folder (or mount its disk), or replace the link with a file"
            )
    if redact_text(text) != text:
        perms = SECRET_MODE
    else:
        try:
            perms = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            perms = 0o666
    atomic_write(path, text, perms=perms)


def checked(path: Path, edited: str, expected: dict[str, Any]) -> str:
    """``edited`` when it holds exactly ``expected``, else a plain dump of it (a file
    shape the text edit cannot handle: flow style, anchors)."""
    if _values_of(edited, path) != expected:
        edited = dump(expected)
        if _values_of(edited, path) != expected:  # pragma: no cover - schema bug guard
            raise ConfigError(f"{path}: could not write the new value safely; nothing changed")
    return edited


def unified_diff(before: str, after: str, path: Path) -> list[str]:
    """The change as ``diff -u`` shows it (an empty list: no change)."""
    import difflib

    return [
        line.rstrip("\r\n")  # a CRLF file's lines too: a CR would move the cursor back
        for line in difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{path} (now)",
            tofile=f"{path} (new)",
        )
    ]


def _values_of(text: str, path: Path) -> dict[str, Any] | None:
    try:
        values, _ = validate_document(load_yaml_text(text, str(path)), str(path))
    except ConfigError:
        return None
    return values


def dump(values: dict[str, Any]) -> str:
    """A fresh, commented file holding ``values`` (flat dotted keys)."""
    out = [HEADER, f"version: {schema.SCHEMA_VERSION}\n"]
    for section in schema.SECTIONS:
        keys = [f for f in schema.FIELDS if f.section == section and f.key in values]
        if not keys:
            continue
        out.append(f"\n{section}:\n")
        for f in keys:
            out.append(f"  {f.key.split('.', 1)[1]}: {render_value(f, values[f.key])}\n")
    return "".join(out)
