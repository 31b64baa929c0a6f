"""What proves an item of the workspace accel's, checked when it is scanned and again
just before it is removed: the record of its format, accel's owner marker, or the name
accel gives what it is writing or deleting (see :mod:`accel.layout` for the names); and
whether the folder it lies in is inside the workspace at all.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from accel import layout
from accel.clean._items import Item
from accel.errors import WorkspaceError
from accel.frameworks import FRAMEWORKS as _FRAMEWORK_NAMES
from accel.layout import is_atomic_temp
from accel.runs import read_record, records_this_run
from accel.training_log import is_crash_log, is_log_file

__all__ = [
    "Bounds",
    "accel_log",
    "in_flight",
    "provably_debris",
    "proves_debris",
    "proves_item",
]

OUTSIDE = "outside the workspace"
ELSEWHERE = "on another filesystem"
_NO_DEVICE = -1  # a data folder not made yet: no folder's device matches it


@dataclass(frozen=True)
class Bounds:
    """The workspace's data folder, resolved, and its filesystem: where clean may act."""

    root: str
    device: int

    @classmethod
    def of(cls, root: str | Path) -> Bounds:
        """The bounds of ``root``; one that does not exist yet (a ``workspace.path`` no
        command has written to) holds nothing to remove, and one made since the scan
        looked is another filesystem until it is scanned again. WorkspaceError for a
        link to a folder that is gone (a disk not mounted): not an empty workspace."""
        real = os.path.realpath(root)
        try:
            return cls(real, os.stat(real).st_dev)
        except FileNotFoundError:
            if os.path.islink(root):
                raise _dangling(Path(root)) from None
            return cls(real, _NO_DEVICE)

    def problem(self, folder: str | Path) -> str | None:
        """Why nothing in ``folder`` may be removed, or None. A linked ``checkpoints/`` or
        ``logs/runs/`` resolves outside the workspace; a mount point is another
        filesystem. The scan asks it once per folder, so the plan keeps what execution
        would refuse; execution asks it again for each item's folder."""
        real = os.path.realpath(folder)
        if real != self.root and not real.startswith(self.root + os.sep):
            return OUTSIDE
        try:
            return ELSEWHERE if os.stat(real).st_dev != self.device else None
        except OSError:
            return None  # gone: there is nothing in it to remove


def _dangling(root: Path) -> WorkspaceError:
    return WorkspaceError(
        f"the data folder {root} is a link to {os.readlink(root)}, which does not exist: "
        "make that folder (or mount its disk), or point workspace.path at another folder"
    )


def in_flight(name: str, is_dir: bool) -> bool:
    """A name accel gives what it is writing or deleting (the marker must still prove it)."""
    if not is_dir:
        return is_atomic_temp(name)
    return bool(layout.DELETED_RE.fullmatch(name) or layout.SYNC_STAGE_RE.fullmatch(name))


def provably_debris(entry: os.DirEntry[str]) -> bool:
    """A folder carrying accel's marker (or holding nothing), or an atomic-write temp."""
    if not entry.is_dir(follow_symlinks=False):
        return not entry.is_symlink() and is_atomic_temp(entry.name)
    path = Path(entry.path)
    return layout.is_owned(path) or layout.is_empty_dir(path)


def proves_debris(path: Path) -> bool:
    """Re-check, just before removal, that ``path`` is still accel's debris."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return layout.is_owned(path) or layout.is_empty_dir(path)
    return stat.S_ISREG(st.st_mode) and is_atomic_temp(path.name)


def proves_item(item: Item) -> bool:
    """Re-check, just before removal, what proved ``item`` accel's when it was scanned
    (checkpoints and entries are re-checked by their own protocols)."""
    path = item.path
    if item.kind == "debris":
        return proves_debris(path)
    if item.kind == "run":
        return not os.path.islink(path) and records_this_run(read_record(path), path)
    if item.kind == "log":
        return not os.path.islink(path) and accel_log(path.name, path)
    if item.kind == "framework":
        return path.name in _FRAMEWORK_NAMES and not os.path.islink(path) and path.is_dir()
    return item.kind in ("entry", "checkpoint")


def accel_log(name: str, path: Path) -> bool:
    if layout.ROTATED_LOG_RE.fullmatch(name):
        return is_log_file(path)
    return layout.CRASH_LOG_RE.fullmatch(name) is not None and is_crash_log(path)
