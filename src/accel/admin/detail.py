"""One checkpoint as ``accel checkpoints show`` reports it: its manifest, and what its
state holds, read from the header of its state file alone (no tensor is loaded, torch
is not imported)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.admin._reading import gone, read_checkpoint
from accel.errors import IntegrityError
from accel.layout import SHARDED_DIR
from accel.store.checkpoints import STATE_TENSORS
from accel.store.manifest import Manifest
from accel.store.series import Found
from accel.store.tensorfile import read_outline

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["CheckpointDetail", "show_checkpoint"]


@dataclass(frozen=True)
class CheckpointDetail:
    """A checkpoint's manifest and, from the header of its state file, what it holds:
    ``state_keys`` (its top-level keys), ``extra_keys`` (the keys of ``extra``, what
    ``Accelerator.save_state(extra=...)`` saved) and ``models``."""

    path: Path
    manifest: Manifest
    state_keys: tuple[str, ...] | None = None
    extra_keys: tuple[str, ...] | None = None
    models: int | None = None
    state_problem: str | None = None

    @property
    def sharded(self) -> bool:
        return any(name.startswith(f"{SHARDED_DIR}/") for name in self.manifest.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            **self.manifest.to_json(),
            "size": self.manifest.size,
            "sharded": self.sharded,
            "state_keys": _list(self.state_keys),
            "extra_keys": _list(self.extra_keys),
            "models": self.models,
            "state_problem": self.state_problem,
        }


def _list(keys: tuple[str, ...] | None) -> list[str] | None:
    return None if keys is None else list(keys)


def show_checkpoint(ws: Workspace, step: int | None, series: str | None) -> CheckpointDetail:
    """The checkpoint at ``step`` (None: the newest) of ``series``, or of the one that has it."""
    return read_checkpoint(ws, step, series, _detail)


def _detail(found: Found) -> CheckpointDetail:
    if STATE_TENSORS not in found.manifest.files:
        return CheckpointDetail(found.path, found.manifest)
    try:
        state = read_outline(found.path / STATE_TENSORS)
    except IntegrityError as exc:
        if gone(found):
            raise  # removed while being read: not damaged
        return CheckpointDetail(found.path, found.manifest, state_problem=str(exc))
    if not isinstance(state, dict):
        return CheckpointDetail(found.path, found.manifest, state_keys=())
    extra, models = state.get("extra"), state.get("models")
    return CheckpointDetail(
        found.path,
        found.manifest,
        state_keys=tuple(str(k) for k in state),
        extra_keys=tuple(str(k) for k in extra) if isinstance(extra, dict) else None,
        models=len(models) if isinstance(models, (list, tuple)) else None,
    )
