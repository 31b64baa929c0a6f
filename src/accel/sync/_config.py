"""A pulled config: written aside, applied only when asked, and then with its difference.

``sync pull`` never replaces ``config/accelerate_config.yaml``: the remote's config goes
to ``config/accelerate_config.pulled.yaml`` once it is a valid config that sets no
variable choosing the code workers run (:func:`accel.sync._trust.config_refusal`).
``sync pull --apply-config`` checks it again, keeps the local value of every
``launch.env`` variable the remote shows as ``***`` (a push never uploads secrets),
shows the difference (redacted) and writes it in place atomically.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel._redact import REDACTED, redact_text
from accel.errors import ConfigError, IntegrityError
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
    """The flat values of a pulled config; IntegrityError when it may not be used."""
    from accel.config.resolve import validate_document
    from accel.config.yamlio import load_yaml_text
    from accel.sync._trust import config_refusal

    try:
        values, _ = validate_document(load_yaml_text(text, source), source)
    except ConfigError as exc:
        raise IntegrityError(f"the remote's config is not valid ({exc}); refused") from None
    reason = config_refusal(values)
    if reason is not None:
        raise IntegrityError(f"the remote's config was refused: {reason}")
    return values


def apply_pulled(ws: Workspace) -> list[str] | None:
    """Apply the config pulled aside; the difference shown (redacted), None when none."""
    from accel._locks import locked
    from accel.config.edit import rewrite
    from accel.config.resolve import read_layer

    aside = pulled_path(ws)
    if not aside.is_file():
        return None
    with locked(ws.lock_path(CONFIG_LOCK), ws.lock_timeout):
        pulled = aside.read_text(encoding="utf-8")
        values = checked(pulled, str(aside))
        local = read_layer("project", ws.config_file)
        current = ws.config_file.read_text(encoding="utf-8") if local else ""
        text, values = _keep_local_secrets(pulled, values, dict(local.values) if local else {})
        rewrite(ws.config_file, current, text, values)  # validated, atomic
        aside.unlink()
    return _diff(current, ws.config_file.read_text(encoding="utf-8"), str(ws.config_file))


def _keep_local_secrets(
    text: str, values: dict[str, Any], local: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """``launch.env`` values the remote shows as ``***`` take the local value (or go)."""
    from accel.config import schema
    from accel.config.edit import render_value, set_in_text, unset_in_text

    env = values.get("launch.env") or {}
    if REDACTED not in env.values():
        return text, values
    mine = local.get("launch.env") or {}
    merged = {
        k: mine[k] if v == REDACTED else v for k, v in env.items() if v != REDACTED or k in mine
    }
    values = {k: v for k, v in values.items() if k != "launch.env"}
    if not merged:
        return unset_in_text(text, "launch.env"), values
    values["launch.env"] = merged
    rendered = render_value(schema.field("launch.env"), merged)
    return set_in_text(text, "launch.env", rendered), values


def _diff(before: str, after: str, name: str) -> list[str]:
    lines = difflib.unified_diff(
        redact_text(before).splitlines(),
        redact_text(after).splitlines(),
        f"{name} (local)",
        f"{name} (remote)",
        lineterm="",
    )
    return list(lines)
