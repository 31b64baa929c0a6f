"""``accel checkpoints verify``: every file of a checkpoint against its manifest.

Each file listed in the manifest is read in full (never through a link) and its size
and xxh3-64 checksum compared with what the save recorded; a checkpoint whose manifest
the reader refuses is a failure too, and so is one whose manifest does not list
``state.tensors`` (every save writes it; loading refuses a checkpoint without it).
Files in the folder that the manifest does not list are reported, not failed: they are
not part of the checkpoint. A checkpoint deleted while it is being verified
(retention, ``accel clean``) is reported as gone, not as corrupt. Reads only; no torch.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.admin._reading import reading
from accel.admin.catalog import find_checkpoint, series_views
from accel.admin.progress import SILENT, Progress
from accel.errors import DamagedFile, UsageError
from accel.layout import MANIFEST, OWNER_MARKER
from accel.store.checkpoints import check_series
from accel.store.hashing import FileDigest, hash_file
from accel.store.manifest import STATE_TENSORS
from accel.store.series import Found, Unreadable

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = [
    "CheckpointCheck",
    "FileProblem",
    "VerifyReport",
    "VerifyTargets",
    "require_series",
    "targets",
    "verify",
    "verify_series",
]


@dataclass(frozen=True)
class FileProblem:
    file: str
    problem: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "problem": self.problem}


@dataclass(frozen=True)
class CheckpointCheck:
    series: str
    step: int
    path: Path
    files: int
    size: int
    problems: tuple[FileProblem, ...] = ()
    unlisted: tuple[str, ...] = ()
    vanished: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "step": self.step,
            "path": str(self.path),
            "files": self.files,
            "size": self.size,
            "ok": self.ok,
            "problems": [p.to_json() for p in self.problems],
            "unlisted": list(self.unlisted),
            "vanished": self.vanished,
        }


@dataclass(frozen=True)
class VerifyTargets:
    """The checkpoints to verify, and the step folders whose manifest is refused."""

    found: tuple[Found, ...]
    unreadable: tuple[Unreadable, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.manifest.size for f in self.found)


@dataclass(frozen=True)
class VerifyReport:
    checks: tuple[CheckpointCheck, ...]
    unreadable: tuple[Unreadable, ...] = ()

    @property
    def failed(self) -> tuple[CheckpointCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.unreadable

    @property
    def files(self) -> int:
        return sum(c.files for c in self.checks if not c.vanished)

    @property
    def size(self) -> int:
        return sum(c.size for c in self.checks if not c.vanished)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checkpoints": [c.to_json() for c in self.checks],
            "unreadable": [{"path": str(u.path), "reason": u.reason} for u in self.unreadable],
            "files": self.files,
            "size": self.size,
        }


def targets(
    ws: Workspace, step: int | None, series: str | None, latest: bool = False
) -> VerifyTargets:
    """``step``'s checkpoint (``latest``: the newest), or every committed (and every
    unreadable) one of ``series`` or of all series. UsageError for a step that is not
    there."""
    if step is not None or latest:
        return VerifyTargets((find_checkpoint(ws, step, series),))
    views = series_views(ws, series).values()
    return VerifyTargets(
        tuple(f for v in views for f in v.checkpoints),
        tuple(u for v in views for u in v.unreadable),
    )


def require_series(ws: Workspace, series: str | None) -> None:
    """UsageError (exit 2) naming the series there are when ``--series`` names none: a
    typo must not make ``verify`` pass on nothing, or ``list`` look like an empty series.
    Without ``--series`` nothing is required (an empty workspace lists no checkpoints)."""
    if series is None:
        return
    name = check_series(series)  # a malformed name says so
    if name in series_views(ws, name):
        return
    there = ", ".join(series_views(ws))
    raise UsageError(
        f"no checkpoint series {name!r}; "
        + (f"the series are: {there}" if there else "there are none")
        + " (`accel checkpoints list` shows what the workspace holds)"
    )


def verify_series(
    ws: Workspace,
    step: int | None,
    series: str | None,
    progress: Progress = SILENT,
    latest: bool = False,
) -> VerifyReport:
    """:func:`targets` verified under their series' readers lock: retention removes none
    of them meanwhile (:mod:`accel.admin._reading`)."""
    require_series(ws, series)
    with reading(ws, series):
        return verify(targets(ws, step, series, latest), progress)


def verify(chosen: VerifyTargets, progress: Progress = SILENT) -> VerifyReport:
    progress.stage("verifying", chosen.total_bytes)
    checks = tuple(check(found, progress) for found in chosen.found)
    return VerifyReport(checks, chosen.unreadable)


def check(found: Found, progress: Progress = SILENT) -> CheckpointCheck:
    """Every file of one checkpoint against its manifest."""
    m = found.manifest
    problems = []
    if STATE_TENSORS not in m.files:  # every save writes it; a load refuses it without
        problems.append(FileProblem(STATE_TENSORS, _NO_STATE))
    for name, digest in sorted(m.files.items()):
        problem = _file_problem(found.path, name, digest, progress)
        if problem is not None:
            if not os.path.isdir(found.path):
                return CheckpointCheck(
                    m.series, m.step, found.path, len(m.files), m.size, vanished=True
                )
            problems.append(FileProblem(name, problem))
    unlisted = _unlisted(found.path, m.files)
    return CheckpointCheck(
        m.series, m.step, found.path, len(m.files), m.size, tuple(problems), unlisted
    )


_NO_STATE = (
    "is not listed in its manifest: every save writes it and loading refuses a "
    "checkpoint without it (damaged; delete it)"
)


def _file_problem(folder: Path, name: str, digest: FileDigest, progress: Progress) -> str | None:
    if _through_link(folder, name):
        return "is reached through a symbolic link"
    try:
        checksum, size = hash_file(folder / name, progress=progress.advance)
    except FileNotFoundError:
        return "is missing"
    except DamagedFile as exc:  # a FIFO, a device, a folder: that file's problem alone
        return exc.why
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link"
        return f"cannot be read ({exc.strerror or exc})"
    if size != digest.size:
        return f"has {size} bytes, its manifest says {digest.size}"
    if checksum != digest.checksum:
        return f"fails its checksum ({checksum}, its manifest says {digest.checksum})"
    return None


def _through_link(folder: Path, name: str) -> bool:
    parts = name.split("/")[:-1]
    return any(os.path.islink(folder.joinpath(*parts[: i + 1])) for i in range(len(parts)))


def _unlisted(folder: Path, files: Mapping[str, FileDigest]) -> tuple[str, ...]:
    extra = []
    for top, dirs, names in os.walk(folder):  # never follows links
        rel = os.path.relpath(top, folder)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = name if rel == "." else f"{rel}/{name}"
            if path not in files and path not in (MANIFEST, OWNER_MARKER):
                extra.append(path)
    return tuple(sorted(extra))
