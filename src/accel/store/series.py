"""The folder of a checkpoint series: what is in it, committing a step, deleting one.

::

    checkpoints/<series>/
      step-<step:012d>/         a committed checkpoint (its manifest: accel.store.manifest)
      .tmp-<step:012d>-<id>/    a save being written (owner marker first, manifest last)
      .old-<step:012d>-<id>/    the previous copy of a step while it is re-saved
      .del-<id>/                a checkpoint being deleted (its manifest goes last)

Re-saving step N when ``step-N`` exists (:func:`swap_in`): the old folder is renamed to
``.old-N-<id>``, the new one from ``.tmp-N-<id>`` to ``step-N`` (the same ``<id>``),
then the old one is deleted. Each rename is fsynced before the next step. A crash
between the renames leaves no ``step-N``, so readers (:func:`view`) take the complete
new copy in ``.tmp-N-<id>`` (or, without it, the old one) as step N: at every instant
one whole copy of step N is visible. The next save or clean of the series (holding its
lease) finishes the swap (:func:`recover`).

The commit of a new step (:func:`commit`), in the order a kill must find it: every
file was written under ``.tmp-<step>-<id>/`` and hashed while written; then
``manifest.json`` goes in last, the folder is fsynced and renamed to ``step-<step>``
(or swapped with the old copy of the step), and the series folder is fsynced. A kill
before the rename leaves an invisible temp folder; after it, a whole checkpoint.

The names a caller gives (a series, a step) are checked here before any path is built
from them (:func:`check_series`, :func:`check_step`).

Only what this module can prove is accel's is ever listed as debris; everything else in
a series folder is ``unknown`` and left alone. Inside a checkpoint, what its manifest
does not list (a user's note) is never deleted with it: :func:`retire_checkpoint`
removes accel's files and keeps the folder with those (unless forced).
"""

from __future__ import annotations

import os
import reprlib
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel import _faults
from accel._fs import fsync_dir
from accel.errors import IntegrityError, ManifestMissing, UsageError, WorkspaceError, write_failed
from accel.layout import (
    ASIDE_PREFIX,
    ASIDE_RE,
    DELETED_RE,
    MANIFEST,
    OWNER_MARKER,
    SERIES_RE,
    STAGE_PREFIX,
    STAGE_RE,
    STEP_PREFIX,
    STEP_RE,
    SYNC_STAGE_RE,
    Layout,
    detach,
    dispose,
    foreign_files,
    is_atomic_temp,
    is_empty_dir,
    is_owned,
    mark,
    remove_own,
)
from accel.store._trace import phase
from accel.store.hashing import FileDigest
from accel.store.manifest import MAX_STEP, Manifest, read_manifest, write_manifest

__all__ = [
    "Found",
    "SeriesView",
    "Unreadable",
    "check_series",
    "check_step",
    "commit",
    "foreign_in",
    "is_series_name",
    "linked",
    "new_manifest",
    "recover",
    "refuse_links",
    "retire",
    "retire_checkpoint",
    "series_from_env",
    "stage_dir_name",
    "step_dir_name",
    "view",
    "warn_kept",
]


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:012d}"


def stage_dir_name(step: int) -> str:
    """A new folder for step ``step`` to be written in, renamed to its step at the commit."""
    return f"{STAGE_PREFIX}{step:012d}-{os.urandom(6).hex()}"


def check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise UsageError(f"invalid checkpoint step {step!r}: use an integer from 0 to {MAX_STEP}")
    return step


def check_series(name: Any) -> str:
    if not isinstance(name, str) or not SERIES_RE.fullmatch(name):
        raise UsageError(
            f"invalid run name {reprlib.repr(name)} for a checkpoint series: use 1 to 128 letters, "
            "digits, '.', '_' or '-', not starting with '.' or '-'"
        )
    return name


def is_series_name(name: str) -> bool:
    return SERIES_RE.fullmatch(name) is not None


def series_from_env(run_name: str, env: Mapping[str, str] | None = None) -> str:
    """``ACCEL_RUN_NAME`` when set, else ``run_name`` (``launch.run_name`` of the config)."""
    env = os.environ if env is None else env
    return check_series(env.get("ACCEL_RUN_NAME") or run_name)


@dataclass(frozen=True)
class Found:
    """One checkpoint as readers see it: its folder and its manifest."""

    path: Path
    manifest: Manifest


@dataclass(frozen=True)
class Unreadable:
    """A ``step-*`` folder whose manifest the reader refuses: never loaded, never deleted."""

    path: Path
    reason: str


@dataclass(frozen=True)
class Swap:
    """An interrupted re-save of ``step``: ``visible`` is its copy readers use now."""

    step: int
    visible: Path
    leftovers: tuple[Path, ...]


@dataclass(frozen=True)
class SeriesView:
    folder: Path
    checkpoints: tuple[Found, ...] = ()  # one per step, by step
    swaps: tuple[Swap, ...] = ()
    debris: tuple[Path, ...] = ()  # accel's leftovers: removable when no save holds the series
    unreadable: tuple[Unreadable, ...] = ()
    unknown: tuple[Path, ...] = ()  # not accel's: left alone

    def step(self, step: int) -> Found | None:
        return next((f for f in self.checkpoints if f.manifest.step == step), None)


@dataclass
class _Sorting:
    committed: dict[int, Found] = field(default_factory=dict)
    staged: dict[tuple[int, str], Found] = field(default_factory=dict)
    asides: dict[int, list[tuple[str, Found]]] = field(default_factory=dict)
    debris: list[Path] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    vanished: bool = False  # a folder listed was gone by the time it was read


_RESCANS = 20


def view(folder: Path) -> SeriesView:
    """What ``folder`` holds, read without changing anything and without following links.

    A live save commits its step before retention retires the one before; a listing
    taken before the commit and read after the retirement would hold neither. So when a
    folder listed is gone by the time it is read, the folder is listed again (a few
    times at most: each listing is a few reads, a save many)."""
    if os.path.islink(folder):  # not accel's (a link could lead anywhere): never read
        return SeriesView(folder, unknown=(folder,))
    found = _Sorting()
    for _ in range(_RESCANS):
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return SeriesView(folder)
        found = _Sorting()
        for entry in entries:
            _sort(Path(entry.path), entry.is_dir(follow_symlinks=False), found)
        if not found.vanished:
            break
    return _resolve(folder, found)


def _sort(path: Path, is_dir: bool, found: _Sorting) -> None:
    name = path.name
    if not is_dir:
        (found.debris if is_atomic_temp(name) else found.unknown).append(path)
        return
    committed, staged, aside = (r.fullmatch(name) for r in (STEP_RE, STAGE_RE, ASIDE_RE))
    match = committed or staged or aside
    if match is None:
        owned = DELETED_RE.fullmatch(name) or SYNC_STAGE_RE.fullmatch(name)
        _leftover(path, found, owned=owned is not None)
        return
    try:
        manifest = read_manifest(path)
    except ManifestMissing:
        if not os.path.lexists(path):  # renamed away (retired, swapped) since listed
            found.vanished = True
            return
        _leftover(path, found, owned=True)
        return
    except IntegrityError as exc:
        if committed:
            found.unreadable.append(Unreadable(path, str(exc)))
        else:
            _leftover(path, found, owned=True)
        return
    step, item = manifest.step, Found(path, manifest)
    if committed:
        found.committed[step] = item
    elif staged:
        found.staged[(step, match.group(2))] = item
    else:
        found.asides.setdefault(step, []).append((match.group(2), item))


def _leftover(path: Path, found: _Sorting, *, owned: bool) -> None:
    """accel's when it carries accel's marker (or holds nothing at all), else unknown."""
    mine = owned and (is_owned(path) or is_empty_dir(path))
    (found.debris if mine else found.unknown).append(path)


def _resolve(folder: Path, found: _Sorting) -> SeriesView:
    visible = dict(found.committed)
    swaps: list[Swap] = []
    debris = list(found.debris)
    used: set[Path] = set()
    for step, asides in sorted(found.asides.items()):
        if step in visible:  # the swap finished; only the old copy's deletion did not
            debris += [item.path for _, item in asides]
            continue
        paired = [(found.staged[(step, t)], a) for t, a in asides if (step, t) in found.staged]
        if paired:
            chosen = paired[-1][0]
        else:
            chosen = max((a for _, a in asides), key=lambda a: a.manifest.created)
        visible[step] = chosen
        used.add(chosen.path)
        leftovers = tuple(a.path for _, a in asides if a.path != chosen.path)
        swaps.append(Swap(step, chosen.path, leftovers))
    debris += [item.path for item in found.staged.values() if item.path not in used]
    return SeriesView(
        folder,
        checkpoints=tuple(visible[s] for s in sorted(visible)),
        swaps=tuple(swaps),
        debris=tuple(sorted(debris)),
        unreadable=tuple(found.unreadable),
        unknown=tuple(found.unknown),
    )


# -- changing the folder (the caller holds the series lease) ------------------------------


def new_manifest(
    series: str,
    step: int,
    tag: str | None,
    files: dict[str, Any],
    world_size: int,
    run_id: str | None = None,
) -> Manifest:
    return Manifest(
        series=series,
        step=step,
        created=time.time(),
        tag=tag,
        run_id=run_id or os.environ.get("ACCEL_RUN_ID"),
        world_size=world_size,
        files={n: FileDigest(int(f["size"]), str(f["checksum"])) for n, f in files.items()},
    )


def commit(tmp: Path, manifest: Manifest, reaper: Reaper) -> Path:
    """Rank 0: the manifest last, then rename ``tmp`` into place (or swap); the folder."""
    target = tmp.parent / step_dir_name(manifest.step)
    try:
        with phase("manifest"):
            write_manifest(tmp, manifest)
        _faults.point("commit.manifest-written")
        with phase("fsync-dir"):
            fsync_dir(tmp)
        with phase("rename"):
            if os.path.lexists(target) and not _replaceable(target):
                _set_aside(target)  # then the step's name is free
            if os.path.lexists(target):
                swap_in(tmp, target, reaper)
            else:
                os.rename(tmp, target)
                _faults.point("commit.renamed")
                fsync_dir(tmp.parent)
    except OSError as exc:
        raise write_failed(target, exc) from exc
    return target


def _replaceable(target: Path) -> bool:
    """A re-save replaces (and deletes) the old folder of its step only when that is a
    checkpoint accel can read, holding nothing but its files."""
    try:
        if os.path.islink(target) or not target.is_dir():
            return False
        return not foreign_in(Found(target, read_manifest(target)))
    except (ManifestMissing, IntegrityError, OSError):
        return False


def _set_aside(target: Path) -> None:
    """The folder at a step being saved that a re-save may not delete (a damaged or
    newer checkpoint, a folder of someone else's, one holding their files) is kept, whole,
    under a name accel never deletes (``unknown``), and said: the save goes on."""
    kept = target.with_name(f"{target.name}.kept-{os.urandom(4).hex()}")
    os.rename(target, kept)
    fsync_dir(target.parent)
    line = (
        f"checkpoint step {target.name.removeprefix(STEP_PREFIX).lstrip('0') or '0'} was "
        f"saved again, but {target} held what accel may not delete (a damaged or newer "
        f"checkpoint, or files of someone else's): kept whole as {kept.name}; look at it, "
        "then remove it yourself"
    )
    warnings.warn(line, RuntimeWarning, stacklevel=4)


def linked(*paths: Path) -> Path | None:
    """The first of ``paths`` that is a symbolic link, or None."""
    return next((path for path in paths if os.path.islink(path)), None)


def refuse_links(*paths: Path) -> None:
    """accel reads, writes and deletes through real folders only: a link could lead
    anywhere (another workspace, another user's files)."""
    path = linked(*paths)
    if path is not None:
        raise WorkspaceError(
            f"{path} is a symbolic link; accel does not read, save or delete checkpoints "
            "through links (move the data with workspace.path instead)"
        )


def swap_in(staged: Path, target: Path, reaper: Reaper) -> None:
    """Replace the committed ``target`` by the complete ``staged`` folder (module doc)."""
    match = STAGE_RE.fullmatch(staged.name)
    assert match is not None, staged
    aside = target.parent / f"{ASIDE_PREFIX}{match.group(1)}-{match.group(2)}"
    mark(target)  # the old copy proves it is accel's, even once superseded
    _faults.point("swap.begin")
    os.rename(target, aside)
    _faults.point("swap.old-moved-aside")
    fsync_dir(target.parent)
    _faults.point("swap.old-aside-durable")
    try:
        os.rename(staged, target)
    except OSError:
        os.rename(aside, target)  # put the old one back: the save fails, nothing is lost
        fsync_dir(target.parent)
        raise
    _faults.point("swap.new-in-place")
    fsync_dir(target.parent)
    _faults.point("swap.new-durable")
    reaper.retire(aside)


def recover(folder: Path, reaper: Reaper) -> None:
    """Finish re-saves that a crash interrupted, and delete superseded old copies."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    if not any(ASIDE_RE.fullmatch(name) for name in names):
        return  # the usual case, at every save: one listing, no manifest read
    current = view(folder)
    for swap in current.swaps:
        _faults.point("recover.begin")
        os.rename(swap.visible, folder / step_dir_name(swap.step))
        _faults.point("recover.renamed")
        fsync_dir(folder)
        for leftover in swap.leftovers:
            reaper.retire(leftover)
    for path in current.debris:
        if ASIDE_RE.fullmatch(path.name) and _committed_copy_of(path):
            reaper.retire(path)


def _committed_copy_of(aside: Path) -> bool:
    match = ASIDE_RE.fullmatch(aside.name)
    assert match is not None
    return (aside.parent / f"{STEP_PREFIX}{match.group(1)}").is_dir()


def retire(step_dir: Path, reaper: Reaper | None = None) -> bool:
    """Delete a checkpoint folder: renamed to ``.del-*`` (durably) before any file goes,
    its manifest removed last. False when it is not there, or is a link (not accel's)."""
    if os.path.islink(step_dir) or not step_dir.is_dir():
        return False
    if reaper is None:
        reaper = Reaper(background=False)
    reaper.retire(step_dir)
    return True


def foreign_in(found: Found) -> list[str]:
    """Files in the checkpoint's folder that its manifest does not list: not accel's."""
    return foreign_files(found.path, _own_files(found.manifest))


def retire_checkpoint(
    found: Found, reaper: Reaper | None = None, *, force: bool = False
) -> list[str] | None:
    """Retire the checkpoint ``found``: None when it is not there (or is a link); else
    the files accel did not make that kept its folder ([] when it went whole).

    Those files are never deleted unless ``force``: accel's go (the owner marker and the
    manifest first, so it is no checkpoint from the first unlink on) and the folder
    stays, holding only them (``unknown`` from then on, left alone).
    """
    foreign = [] if force or os.path.islink(found.path) else foreign_in(found)
    if not foreign:
        return [] if retire(found.path, reaper) else None
    remove_own(found.path, _own_files(found.manifest), (OWNER_MARKER, MANIFEST))
    return foreign


def warn_kept(layout: Layout, path: Path, names: list[str], command: str = "retention") -> None:
    """A warning and a line in training.log: retention or a delete kept ``path`` for
    ``names``, the files accel did not make."""
    from accel.training_log import log_event

    line = (
        f"kept {path}: it holds {len(names)} file(s) accel did not make "
        f"({', '.join(names[:5])}); accel's files are gone, move those and remove the folder"
    )
    warnings.warn(line, RuntimeWarning, stacklevel=3)
    log_event(layout, None, line, "warning", command=command)


def _own_files(manifest: Manifest) -> Callable[[str], bool]:
    return (frozenset(manifest.files) | {MANIFEST, OWNER_MARKER}).__contains__


class Reaper:
    """Deletes retired folders, in background threads when asked (retention must not
    stall the training loop). Threads are not daemons: the interpreter finishes the
    removal before it exits."""

    def __init__(self, background: bool = True) -> None:
        self.background = background
        self._threads: list[threading.Thread] = []

    def retire(self, path: Path) -> None:
        try:
            doomed = detach(path, durable=not self.background)
        except FileNotFoundError:
            return
        _faults.point("retire.detached")
        if not self.background:
            _remove(doomed)
            return
        thread = threading.Thread(target=_remove_durably, args=(doomed,), name="accel-reap")
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def join(self) -> None:
        while self._threads:
            self._threads.pop().join()


def _remove_durably(doomed: Path) -> None:
    """Make the rename to ``doomed`` durable before a single byte of data goes."""
    with phase("reap-fsync"):
        fsync_dir(doomed.parent)
    _faults.point("retire.detach-durable")
    with phase("reap-remove"):
        _remove(doomed)


def _remove(doomed: Path) -> None:
    dispose(doomed)
    _faults.point("retire.removed")
