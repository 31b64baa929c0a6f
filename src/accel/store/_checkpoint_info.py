"""What a committed checkpoint looks like to its readers: :class:`CheckpointInfo`, and the
checks of the names a caller gives (step, series) before any path is built from them.

The on-disk format itself (``manifest.json``) is :mod:`accel.store.manifest`'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.errors import UsageError, WorkspaceError
from accel.layout import MANIFEST
from accel.layout import SERIES_RE as _SERIES_RE
from accel.store.manifest import MAX_STEP, parse_manifest
from accel.store.series import Found

__all__ = [
    "STATE_FILE",
    "CheckpointInfo",
    "check_series",
    "check_step",
    "info_from_json",
    "info_of",
    "refuse_links",
    "series_from_env",
]

STATE_FILE = "state.tensors"


@dataclass(frozen=True)
class CheckpointInfo:
    series: str
    step: int
    path: Path
    created: float
    size: int
    tag: str | None
    run_id: str | None
    world_size: int
    files: tuple[str, ...]


def check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise UsageError(f"invalid checkpoint step {step!r}: use an integer from 0 to {MAX_STEP}")
    return step


def check_series(name: Any) -> str:
    if not isinstance(name, str) or not _SERIES_RE.fullmatch(name):
        raise UsageError(
            f"invalid run name {name!r} for a checkpoint series: use letters, digits, "
            "'.', '_' or '-' (not starting with '.')"
        )
    return name


def is_series_name(name: str) -> bool:
    return _SERIES_RE.fullmatch(name) is not None


def series_from_env(run_name: str, env: Mapping[str, str] | None = None) -> str:
    """``ACCEL_RUN_NAME`` when set, else ``run_name`` (``launch.run_name`` of the config)."""
    env = os.environ if env is None else env
    return check_series(env.get("ACCEL_RUN_NAME") or run_name)


def info_of(found: Found) -> CheckpointInfo:
    m = found.manifest
    return CheckpointInfo(
        series=m.series,
        step=m.step,
        path=found.path,
        created=m.created,
        size=m.size,
        tag=m.tag,
        run_id=m.run_id,
        world_size=m.world_size,
        files=tuple(sorted(m.files)),
    )


def info_from_json(data: dict[str, Any]) -> CheckpointInfo:
    """The info rank 0 broadcast (``{"path", "manifest"}``) back as a CheckpointInfo."""
    path = Path(data["path"])
    return info_of(Found(path, parse_manifest(data["manifest"], str(path / MANIFEST))))


def refuse_links(root: Path, folder: Path) -> None:
    """accel writes and deletes through real folders only: a link could lead anywhere."""
    for path in (root, folder):
        if os.path.islink(path):
            raise WorkspaceError(
                f"{path} is a symbolic link; accel does not save or delete through links "
                "(move the data with workspace.path instead)"
            )
