"""A pulled config: written aside, applied only when asked, and then only what it may carry.

``sync pull`` never replaces ``config/accelerate_config.yaml``: the remote's config goes
to ``config/accelerate_config.pulled.yaml`` once it is a valid config. ``sync pull
--apply-config`` reads it once, checks it again and takes from it only the keys of the
allowlist :data:`accel.sync._trust.CONFIG_CARRIED` (numbers, switches, fixed choices);
every other key (``launch.env``, ``launch.preload*``, endpoints, paths) keeps its local
value and is listed with the reason. The difference is shown (redacted) and written in
place atomically, after the local config is found unchanged since it was shown.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel._redact import redact_text
from accel.errors import ConfigError, IntegrityError, UsageError
from accel.layout import CONFIG_LOCK

if TYPE_CHECKING:
    from accel.workspace import Workspace

PULLED_NAME = "accelerate_config.pulled.yaml"


def pulled_path(ws: Workspace) -> Path:
    return ws.config_file.with_name(PULLED_NAME)


def pulled_aside(ws: Workspace) -> Path | None:
    """The remote's config a pull wrote aside, when there is one to apply."""
    aside = pulled_path(ws)
    return aside if aside.is_file() else None


def checked(text: str, source: str) -> dict[str, Any]:
    """The flat values of a pulled config; IntegrityError when it is not a valid config."""
    from accel.config.resolve import validate_document
    from accel.config.yamlio import load_yaml_text

    try:
        values, _ = validate_document(load_yaml_text(text, source), source)
    except ConfigError as exc:
        raise IntegrityError(f"the remote's config is not valid ({exc}); refused") from None
    return values


@dataclass(frozen=True)
class ConfigChange:
    """What ``--apply-config`` would do: the local text before and after, the flat values
    after, and each key of the remote's left out with the reason."""

    pulled: str
    before: str
    after: str
    values: dict[str, Any]
    left_out: list[tuple[str, str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.after == self.before

    def diff(self, name: str) -> list[str]:
        """The change as ``diff -u`` shows it, redacted (an empty list: no change)."""
        lines = difflib.unified_diff(
            redact_text(self.before).splitlines(),
            redact_text(self.after).splitlines(),
            f"{name} (local)",
            f"{name} (remote)",
            lineterm="",
        )
        return list(lines)


def plan_pulled(ws: Workspace) -> ConfigChange | None:
    """What applying the config pulled aside would change; None when there is none."""
    aside = pulled_aside(ws)
    if aside is None:
        return None
    local = _local_text(ws)
    return merge(aside.read_text(encoding="utf-8"), str(aside), local, str(ws.config_file))


def apply_pulled(ws: Workspace, change: ConfigChange) -> None:
    """Write ``change`` (from :func:`plan_pulled`) and remove the config pulled aside;
    UsageError, nothing written, when either file changed since it was planned."""
    from accel._locks import locked
    from accel.config.edit import rewrite

    aside = pulled_path(ws)
    with locked(ws.lock_path(CONFIG_LOCK), ws.lock_timeout):
        now = aside.read_text(encoding="utf-8") if aside.is_file() else None
        if now != change.pulled or _local_text(ws) != change.before:
            raise UsageError(
                f"{ws.config_file} or {aside} changed since the difference was shown; "
                "nothing applied: run the command again"
            )
        if not change.empty:
            rewrite(ws.config_file, change.before, change.after, change.values)  # validated
        aside.unlink()


def merge(pulled: str, source: str, local: str, local_source: str) -> ConfigChange:
    """The local config text with the carried keys of ``pulled`` set (or unset, where the
    remote leaves them out); every other key keeps its local value."""
    from accel.config import edit, schema
    from accel.sync._trust import config_left_out

    remote = checked(pulled, source)
    mine = _values(local, local_source) if local else {}
    text = local or f"version: {schema.SCHEMA_VERSION}\n"
    values = dict(mine)
    left_out = []
    for key in sorted(set(remote) | set(mine)):
        reason = config_left_out(key)
        if reason is not None:
            if key in remote and remote[key] != mine.get(key, schema.BY_KEY[key].default):
                left_out.append((key, reason))
        elif key not in remote:
            text, _ = edit.unset_in_text(text, key), values.pop(key)
        elif remote[key] != mine.get(key, _MISSING):
            rendered = edit.render_value(schema.BY_KEY[key], remote[key], _typed(key, remote[key]))
            text = edit.set_in_text(text, key, rendered)
            values[key] = remote[key]
    if values == mine:
        return ConfigChange(pulled, local, local, values, left_out)
    after = edit.checked(Path(local_source), text, values)  # what will be written, validated
    return ConfigChange(pulled, local, after, values, left_out)


_MISSING = object()


def _typed(key: str, value: Any) -> str | None:
    """A size or duration as a person writes it (``10s``, ``10MiB``)."""
    from accel.config import schema

    return None if value is None else schema.display(key, value)


def _local_text(ws: Workspace) -> str:
    path = ws.config_file
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def _values(text: str, source: str) -> dict[str, Any]:
    from accel.config.resolve import validate_document
    from accel.config.yamlio import load_yaml_text

    return validate_document(load_yaml_text(text, source), source)[0]
