"""The checkpoints of a workspace as ``accel checkpoints list`` reports them, and which
one a ``STEP`` (with or without ``--series``) names.

Every series folder is read by :func:`accel.store.series.view`, so what is listed as a
checkpoint is exactly what the store would load, and what it refuses is listed as
``unreadable`` (with the reason), accel's own leftovers as ``debris``, anything else as
``unknown``: reported, never a crash. Reads only; no torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel import layout
from accel._fs import tree_size
from accel.clean import held_series
from accel.errors import IntegrityError, UsageError
from accel.store import series as series_mod
from accel.store.checkpoints import check_series, check_step
from accel.store.manifest import Manifest
from accel.store.series import Found, SeriesView

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = [
    "CheckpointListing",
    "CheckpointRow",
    "Leftover",
    "find_checkpoint",
    "list_checkpoints",
    "parse_step",
    "parse_step_or_latest",
    "series_views",
]

DEBRIS = "debris"
UNREADABLE = "unreadable"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class CheckpointRow:
    """One committed checkpoint; ``held``: a live run holds its series now."""

    path: Path
    manifest: Manifest
    held: bool = False

    def to_json(self, now: float) -> dict[str, Any]:
        m = self.manifest
        return {
            "series": m.series,
            "step": m.step,
            "path": str(self.path),
            "size": m.size,
            "files": len(m.files),
            "created": m.created,
            "age_seconds": now - m.created,
            "run_id": m.run_id,
            "tag": m.tag,
            "world_size": m.world_size,
            "series_in_use": self.held,
        }


@dataclass(frozen=True)
class Leftover:
    """Something in the checkpoints folder that is no checkpoint (``kind``: debris,
    unreadable or unknown), with why when there is a reason to give."""

    series: str | None
    path: Path
    kind: str
    size: int
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "path": str(self.path),
            "kind": self.kind,
            "size": self.size,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CheckpointListing:
    root: Path
    now: float
    checkpoints: tuple[CheckpointRow, ...]
    leftovers: tuple[Leftover, ...]

    @property
    def total_bytes(self) -> int:
        return sum(row.manifest.size for row in self.checkpoints)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoints_dir": str(self.root),
            "now": self.now,
            "checkpoints": [row.to_json(self.now) for row in self.checkpoints],
            "total_bytes": self.total_bytes,
            "other": [item.to_json() for item in self.leftovers],
        }


def series_views(ws: Workspace, series: str | None = None) -> dict[str, SeriesView]:
    """Every series folder (or just ``series``) as the store reads it, by name; none when
    the workspace does not exist yet (WorkspaceError for a folder accel did not make)."""
    name = None if series is None else check_series(series)
    if not ws.identify():
        return {}
    names = _series_names(ws)
    if name is not None:
        # A series folder that is a link is not read through (listed as unknown).
        names = [name] if name in names else []
    return {n: series_mod.view(ws.checkpoints_dir / n) for n in names}


def _series_names(ws: Workspace) -> list[str]:
    try:
        with os.scandir(ws.checkpoints_dir) as it:
            return sorted(
                e.name
                for e in it
                if e.is_dir(follow_symlinks=False) and layout.SERIES_RE.fullmatch(e.name)
            )
    except OSError:
        return []


def list_checkpoints(ws: Workspace, now: float, series: str | None = None) -> CheckpointListing:
    views = series_views(ws, series)
    held = held_series(ws.locks_dir) if views else frozenset[str]()
    rows = [
        CheckpointRow(found.path, found.manifest, name in held)
        for name, view in views.items()
        for found in view.checkpoints
    ]
    leftovers = [item for name, view in views.items() for item in _leftovers(name, view)]
    if series is None:
        leftovers += _strays(ws.checkpoints_dir)
    return CheckpointListing(ws.checkpoints_dir, now, tuple(rows), tuple(leftovers))


def _leftovers(name: str, view: SeriesView) -> list[Leftover]:
    out = [Leftover(name, p, DEBRIS, _size(p)) for p in view.debris]
    out += [Leftover(name, u.path, UNREADABLE, _size(u.path), u.reason) for u in view.unreadable]
    out += [Leftover(name, p, UNKNOWN, _size(p)) for p in view.unknown]
    return out


def _size(path: Path) -> int:
    """Bytes under ``path``; a link counts as nothing (what it points at is not ours)."""
    return 0 if os.path.islink(path) else tree_size(path)


def _strays(folder: Path) -> list[Leftover]:
    """What sits in ``checkpoints/`` beside the series folders."""
    out = []
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return []
    for entry in entries:
        path = Path(entry.path)
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and layout.SERIES_RE.fullmatch(entry.name):
            continue
        mine = is_dir and layout.DELETED_RE.fullmatch(entry.name) and layout.is_owned(path)
        out.append(Leftover(None, path, DEBRIS if mine else UNKNOWN, _size(path)))
    return out


# -- which checkpoint a STEP names ----------------------------------------------------------


def parse_step(text: str, *, latest: bool = False) -> int:
    """``1200`` or the folder name ``step-000000001200``; UsageError otherwise
    (``latest``: the message offers ``latest`` too, where the command takes it)."""
    raw = text.strip()
    match = layout.STEP_RE.fullmatch(raw)
    digits = match.group(1) if match else raw
    if not digits.isascii() or not digits.isdigit():
        alias = " or `latest`" if latest else ""
        raise UsageError(
            f"invalid checkpoint step {text!r}: use a number such as 1200{alias} "
            "(see `accel checkpoints list`)"
        )
    return check_step(int(digits))


def parse_step_or_latest(text: str) -> int | None:
    """A STEP that may also be ``latest``, as a run may (`accel logs latest`): None for
    the newest committed checkpoint."""
    return None if text.strip().lower() == "latest" else parse_step(text, latest=True)


def find_checkpoint(ws: Workspace, step: int | None, series: str | None) -> Found:
    """The committed checkpoint ``step`` names (None: the latest), in ``series`` or in
    the one series that has it. UsageError when there is none or the choice is ambiguous;
    IntegrityError when the folder of that step is unreadable."""
    views = series_views(ws, series)
    if step is None:
        return _latest(views, series)
    hits = [(name, f) for name, view in views.items() if (f := view.step(step)) is not None]
    if len(hits) == 1:
        return hits[0][1]
    if hits:
        names = ", ".join(name for name, _ in hits)
        raise UsageError(f"step {step} is in several series ({names}): pass --series NAME")
    _refuse_unreadable(views, step)
    raise UsageError(f"no checkpoint at step {step}{_in(series)}; {_what_exists(views)}")


def _latest(views: dict[str, SeriesView], series: str | None) -> Found:
    having = {name: view.checkpoints[-1] for name, view in views.items() if view.checkpoints}
    if len(having) == 1:
        return next(iter(having.values()))
    if having:
        names = ", ".join(having)
        raise UsageError(f"several series have checkpoints ({names}): pass --series NAME")
    raise UsageError(f"no committed checkpoint{_in(series)}; {_what_exists(views)}")


def _refuse_unreadable(views: dict[str, SeriesView], step: int) -> None:
    name = series_mod.step_dir_name(step)
    for view in views.values():
        for bad in view.unreadable:
            if bad.path.name == name:
                raise IntegrityError(f"{bad.reason}; it cannot be used (delete it by hand)")


def _in(series: str | None) -> str:
    return "" if series is None else f" in series {series!r}"


def _what_exists(views: dict[str, SeriesView]) -> str:
    parts = [f"{name}: steps {_steps(v.checkpoints)}" for name, v in views.items() if v.checkpoints]
    if not parts:
        return "there are none (`accel checkpoints list` shows what the workspace holds)"
    return "there are " + "; ".join(parts)


def _steps(found: Sequence[Found]) -> str:
    steps = [str(f.manifest.step) for f in found]
    return ", ".join(steps if len(steps) <= 6 else [*steps[:2], "...", *steps[-3:]])
