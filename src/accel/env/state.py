"""The configuration and the workspace as ``accel env`` reports them (secrets redacted)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from accel._redact import redact_mapping, redact_text
from accel.env.report import ConfigInfo, WorkspaceInfo
from accel.errors import AccelError, ConfigError
from accel.workspace import LAYOUT_VERSION, Workspace


def config_info(ws: Workspace) -> ConfigInfo:
    file = str(ws.config_file)
    exists = ws.config_file.exists()
    try:
        config = ws.config
    except ConfigError as exc:
        return ConfigInfo(file, exists, False, redact_text(str(exc)), {}, {}, config_fix(ws, exc))
    except AccelError as exc:
        return ConfigInfo(file, exists, False, redact_text(str(exc)), {}, {})
    except Exception as exc:  # noqa: BLE001 - e.g. an unreadable user file
        return ConfigInfo(file, exists, False, redact_text(f"{type(exc).__name__}: {exc}"), {}, {})
    values = redact_mapping(config.nested())
    origins = {k: str(o) for k, o in config.origins.items()}
    return ConfigInfo(file, exists, True, None, values, origins)


def config_fix(ws: Workspace, exc: ConfigError) -> str | None:
    """The command that repairs a config error: unset the bad key, or the bad variable."""
    text = str(exc)
    variable = re.match(r"environment variable ([A-Z0-9_]+):", text)
    if variable:
        return f"unset {variable.group(1)}"
    if exc.key and text.startswith(f"{ws.config_file}:"):
        return f"accel config unset {exc.key}"
    return None  # a YAML error, or the user file: an edit by hand, at the line named


def workspace_info(ws: Workspace) -> WorkspaceInfo:
    from accel.runs import live_run_ids
    from accel.status import collect as status

    exists = ws.exists
    layout: int | None = None
    try:
        layout = ws.layout_version()
    except AccelError:
        layout = None
    sizes: dict[str, int] = {}
    live: tuple[str, ...] = ()
    if exists and (layout is None or layout <= LAYOUT_VERSION):
        try:
            st = status(ws, details=False)
            sizes = {p.name: p.size for p in st.parts}
            live = tuple(sorted(live_run_ids(ws.layout)))
        except Exception:  # noqa: BLE001 - e.g. an unreadable folder: report without sizes
            pass
    return WorkspaceInfo(str(ws.path), exists, writable(ws.path), layout, sizes, live)


def writable(path: Path) -> bool:
    """Whether accel could write in ``path`` (or create it, when it does not exist)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    if not probe.is_dir():
        return False
    return os.access(probe, os.W_OK | os.X_OK) and not _read_only_mount(probe)


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & getattr(os, "ST_RDONLY", 1))
    except (OSError, AttributeError):
        return False
