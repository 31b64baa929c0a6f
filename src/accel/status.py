"""What the workspace holds, measured: the data behind ``accel status``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from accel.errors import AccelError
from accel.fsutil import tree_size
from accel.workspace import Workspace


@dataclass(frozen=True)
class PartSize:
    name: str
    path: Path
    size: int


@dataclass(frozen=True)
class WorkspaceStatus:
    path: Path
    exists: bool
    layout_version: int | None
    config_file: Path
    config_error: str | None
    parts: tuple[PartSize, ...]

    @property
    def total_size(self) -> int:
        return sum(p.size for p in self.parts)


def collect(ws: Workspace) -> WorkspaceStatus:
    config_error = None
    try:
        _ = ws.config
    except AccelError as exc:
        config_error = str(exc)
    layout = None
    try:
        layout = ws.layout_version()
    except AccelError as exc:
        config_error = config_error or str(exc)
    parts = (
        ("config", ws.path / "config"),
        ("cache", ws.cache_dir if config_error is None else ws.path / "cache"),
        ("checkpoints", ws.checkpoints_dir if config_error is None else ws.path / "checkpoints"),
        ("logs", ws.logs_dir if config_error is None else ws.path / "logs"),
        ("state", ws.state_file if config_error is None else ws.path / "state.bin"),
    )
    return WorkspaceStatus(
        path=ws.path,
        exists=ws.exists,
        layout_version=layout,
        config_file=ws.config_file,
        config_error=config_error,
        parts=tuple(PartSize(name, p, _size(p)) for name, p in parts),
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else tree_size(path)
    except OSError:
        return 0
