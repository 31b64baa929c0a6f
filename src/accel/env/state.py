"""The configuration and the workspace as ``accel env`` reports them (secrets redacted)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from accel._redact import redact_mapping, redact_text
from accel.config.resolve import config_fix
from accel.env.report import ConfigInfo, WorkspaceInfo
from accel.errors import AccelError, ConfigError
from accel.workspace import LAYOUT_VERSION, Workspace

if TYPE_CHECKING:
    from accel.clean import WorkspaceScan
    from accel.status import WorkspaceStatus


def config_info(ws: Workspace) -> ConfigInfo:
    file = str(ws.config_file)
    exists = ws.config_file.exists()
    try:
        config = ws.config
    except ConfigError as exc:
        return ConfigInfo(
            file, exists, False, redact_text(str(exc)), {}, {}, config_fix(ws.config_file, exc)
        )
    except AccelError as exc:
        return ConfigInfo(file, exists, False, redact_text(str(exc)), {}, {})
    except Exception as exc:  # noqa: BLE001 - e.g. an unreadable user file
        return ConfigInfo(file, exists, False, redact_text(f"{type(exc).__name__}: {exc}"), {}, {})
    values = redact_mapping(config.nested())
    origins = {k: str(o) for k, o in config.origins.items()}
    return ConfigInfo(file, exists, True, None, values, origins)


def workspace_state(
    ws: Workspace, *, scan: bool = False
) -> tuple[WorkspaceInfo, WorkspaceScan | None]:
    """The workspace's report and, with ``scan``, the clean scan read in the same walk as
    its sizes (the debris rule of ``--check`` judges it); None when it was not read."""
    from accel.runs import live_run_ids

    exists = ws.exists
    layout: int | None = None
    try:
        layout = ws.layout_version()
    except AccelError:
        layout = None
    sizes: dict[str, int] = {}
    live: tuple[str, ...] = ()
    found: WorkspaceScan | None = None
    if exists and (layout is None or layout <= LAYOUT_VERSION):
        st = _measured(ws, scan)
        if st is not None:
            found = st.scan
            sizes = {p.name: p.size for p in st.parts}
            try:
                live = tuple(sorted(live_run_ids(ws.layout) if found is None else found.live_runs))
            except Exception:  # noqa: BLE001 - as before: the sizes, no live runs
                pass
    info = WorkspaceInfo(str(ws.path), exists, writable(ws.path), layout, sizes, live)
    return info, found


def _measured(ws: Workspace, scan: bool) -> WorkspaceStatus | None:
    """The sizes (and the scan); without the scan when that is what fails, as it did
    when the debris rule read it on its own."""
    from accel.status import collect as status

    for with_scan in (True, False) if scan else (False,):
        try:
            return status(ws, details=False, scan=with_scan)
        except Exception:  # noqa: BLE001 - e.g. an unreadable folder: no sizes
            continue
    return None


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
