"""The workspace layout: the one module that names every folder, file and lock.

::

    .accelerate/                        the workspace root (``--workspace`` points here)
      layout.json                       {"layout_version": 1, "id": ...}: makes the folder accel's
      config/accelerate_config.yaml     the project configuration
      locks/<name>.lock                 one lock file per resource, never deleted
      locks/runs-settled.json           runs whose record is final (noted by launches)
      state.bin  cache/  checkpoints/  logs/  tmp/     the data, unless relocated:
    <workspace.path>/                   a relocated data folder
      accel-data.json                   {"layout_version": 1, "workspace_id": ...}: whose data it is
      state.bin  cache/  checkpoints/  logs/  tmp/

Which folder is a workspace at all is :mod:`accel.identity`'s to say.

Ownership: accel deletes only what it can prove it made. A committed checkpoint, cache
entry or run proves it by its own format (manifest, ``meta.json``, ``run.json``, read by
their one reader); a folder accel is still writing, or is deleting, by the empty
``OWNER_MARKER`` file created first and removed last; an interrupted atomic write by its
``.accel-tmp-`` name. Everything else is someone else's and is left alone.

This module sits on floor 1 (docs/architecture.md): it takes paths and imports only the
ground floor, never the workspace facade, the config, the store or clean.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from accel._fs import TMP_PREFIX, fsync_dir, remove_tree
from accel._worker_hooks import CRASH_SUFFIX, STACK_SUFFIX
from accel._worker_hooks import HEARTBEATS_DIR as HEARTBEATS_DIR
from accel._worker_hooks import RANK_PREFIX as RANK_PREFIX
from accel._worker_hooks import STACKS_DIR as STACKS_DIR
from accel._worker_hooks import rank_name as rank_name

__all__ = [
    "LAYOUT_VERSION",
    "LAYOUT_VERSIONS",
    "Layout",
    "foreign_files",
    "lock_file",
    "remove_own",
    "run_file",
    "run_lock",
    "series_holder",
    "series_lock",
]

DIRNAME = ".accelerate"
LAYOUT_FILE = "layout.json"
GITIGNORE = ".gitignore"  # keeps all but the config out of git (written with the folder)
DATA_MARKER = "accel-data.json"
LAYOUT_VERSION = 1  # what this accel writes
# Every layout version this accel reads: an allowlist (a release that migrates an old
# layout adds it here). One above them all is a newer accel's, refused with "upgrade";
# anything else (0, -1, true, 1.0, "1") no accel wrote, and is refused as damage.
LAYOUT_VERSIONS = frozenset({LAYOUT_VERSION})

# -- the root ----------------------------------------------------------------------------
CONFIG_DIR = "config"
CONFIG_NAME = "accelerate_config.yaml"
LOCKS_DIR = "locks"
LOCK_SUFFIX = ".lock"
SERIES_LOCK_PREFIX = "series-"
RUN_LOCK_PREFIX = "run-"
READERS_LOCK_PREFIX = "readers-"  # shared by export/show/verify; retention waits its turn
# The other locks (locks/<name>.lock), by what they guard:
LAYOUT_LOCK = "layout"  # creating the workspace
CONFIG_LOCK = "config"  # the project file
STATE_LOCK = "state"  # state.bin
CACHE_LOCK = "cache"  # cache entries (put, touch, delete, clean, sync)
CLEAN_LOCK = "clean"  # one clean at a time
SYNC_LOCK = "sync"  # one push or pull at a time
SYNC_COMMIT_LOCK = "sync-commit"  # a pulled checkpoint or run moving into place
LOG_LOCK = "training-log"  # logs/training.log and its rotation
# Beside the locks, not a lock: the run folders whose run.json no longer says "running" and
# never will again, noted by each launch at its end (accel.runs.record), so the heal of
# crashed runs reads only the others.
SETTLED_RUNS = "runs-settled.json"
# -- the data folder ---------------------------------------------------------------------
STATE_FILE = "state.bin"
CACHE_DIR = "cache"
ENTRIES_DIR = "entries"
FRAMEWORKS_DIR = "frameworks"
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
RUNS_DIR = "runs"
TMP_DIR = "tmp"
TRAINING_LOG = "training.log"
DATA_NAMES = frozenset({STATE_FILE, CACHE_DIR, CHECKPOINTS_DIR, LOGS_DIR, TMP_DIR})
# The same places as /-separated paths from the data folder (a sync remote mirrors them)
CONFIG_REL = f"{CONFIG_DIR}/{CONFIG_NAME}"
RUNS_REL = f"{LOGS_DIR}/{RUNS_DIR}"
ENTRIES_REL = f"{CACHE_DIR}/{ENTRIES_DIR}"
# -- items and their proofs --------------------------------------------------------------
MANIFEST = "manifest.json"  # a committed checkpoint (written last)
CACHE_META = "meta.json"  # a committed cache entry (written last)
SNAPSHOT_META = "meta.json"  # a whole snapshot in the memory tier (store/memtier.py; last)
RUN_RECORD = "run.json"  # a run
OWNER_MARKER = ".accel-owned"  # a folder accel is writing or deleting (first in, last out)
PROOF_FILES = (MANIFEST, CACHE_META, RUN_RECORD, OWNER_MARKER)  # removed last, in this order
ENTRY_SUFFIX = ".entry"
HOLDER_SUFFIX = ".holder.json"
SERIES_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # a checkpoint series folder
# -- names of folders in flight ----------------------------------------------------------
STEP_PREFIX = "step-"  # step-<12 digits>: a committed checkpoint
STAGE_PREFIX = ".tmp-"  # .tmp-<step>-<id>: a checkpoint being written
ASIDE_PREFIX = ".old-"  # .old-<step>-<id>: the old copy while re-saving
DELETED_PREFIX = ".del-"  # .del-<id>: anything being deleted, beside its place
SYNC_STAGE_PREFIX = ".tmp-sync-"  # .tmp-sync-<id>: a checkpoint or entry being pulled
_STEP, _ID = "([0-9]{12})", "([0-9a-f]{12})"
STEP_RE = re.compile(rf"{STEP_PREFIX}{_STEP}")
STAGE_RE = re.compile(rf"{re.escape(STAGE_PREFIX)}{_STEP}-{_ID}")
ASIDE_RE = re.compile(rf"{re.escape(ASIDE_PREFIX)}{_STEP}-{_ID}")
DELETED_RE = re.compile(rf"{re.escape(DELETED_PREFIX)}[0-9a-f]{{12}}")
SYNC_STAGE_RE = re.compile(rf"{re.escape(SYNC_STAGE_PREFIX)}[0-9a-f]{{12}}")
VERSION_RE = re.compile(r"v[0-9a-f]{16}")  # a cache entry's payload version folder
ROTATED_LOG_RE = re.compile(rf"{re.escape(TRAINING_LOG)}\.[0-9]+")
LOG_SUFFIX = ".log"  # rank-N.log (what each rank printed), crash-*.log
CRASH_LOG_PREFIX = "crash-"  # logs/crash-<stamp>-<pid>-<hex>.log: an unexpected error
CRASH_LOG_RE = re.compile(
    rf"{CRASH_LOG_PREFIX}[0-9]{{8}}-[0-9]{{6}}-[0-9]+(-[0-9a-f]{{8}})?{re.escape(LOG_SUFFIX)}"
)
# -- a run folder (logs/runs/<run-id>/): every file accel writes there -------------------
LAUNCHER_LOG = "launcher.log"  # torch's own messages and C++ traces, kept off the console
METRICS_FILE = "metrics.jsonl"  # what the script logs (Accelerator.log)
LOCAL_RUN = "local"  # the run folder of a script's metrics outside `accel launch`: no run.json
RESOURCES_FILE = "resources.jsonl"  # CPU, memory and GPU samples
WORKERS_FILE = "workers.json"  # {"attempt": N, "pids": {"<rank>": pid}} of this node
LOG_INDEX_SUFFIX = ".idx"  # beside each rank-N.log: time -> offset
TB_DIR = "tensorboard"  # rank-N/events.out.tfevents.*
_RANK = rf"{re.escape(RANK_PREFIX)}[0-9]{{1,6}}"
# STACKS_DIR, HEARTBEATS_DIR and rank_name (rank-N) come from accel._worker_hooks, which
# workers load without accel.
SHARDED_DIR = "sharded"  # a checkpoint's DCP shards (FSDP), beside its manifest


def rank_log(rank: int | str) -> str:
    """``rank-N.log``: what rank N printed."""
    return rank_name(rank, LOG_SUFFIX)


RUN_FILE_RE = re.compile(  # the one list: sync pulls these and nothing else into a run
    "|".join(
        [
            *(re.escape(n) for n in (RUN_RECORD, LAUNCHER_LOG, METRICS_FILE)),
            *(re.escape(n) for n in (RESOURCES_FILE, WORKERS_FILE)),
            rf"{_RANK}{re.escape(LOG_SUFFIX)}(?:{re.escape(LOG_INDEX_SUFFIX)})?",
            rf"{STACKS_DIR}/{_RANK}(?:{re.escape(STACK_SUFFIX)}|{re.escape(CRASH_SUFFIX)})",
            rf"{HEARTBEATS_DIR}/{_RANK}",
            rf"{TB_DIR}/{_RANK}/events\.out\.tfevents\.[A-Za-z0-9._-]{{1,200}}",
        ]
    )
)


def lock_file(root: Path, name: str) -> Path:
    """The lock file of resource ``name`` (created on demand, never deleted)."""
    return root / LOCKS_DIR / f"{name}{LOCK_SUFFIX}"


def series_lock(root: Path, series: str) -> Path:
    """The lease of a checkpoint series: held by the one run saving into it."""
    return lock_file(root, f"{SERIES_LOCK_PREFIX}{series}")


def series_holder(root: Path, series: str) -> Path:
    """Who holds the lease of ``series`` (for messages; the flock is what counts)."""
    return root / LOCKS_DIR / f"{SERIES_LOCK_PREFIX}{series}{HOLDER_SUFFIX}"


def series_readers_lock(root: Path, series: str) -> Path:
    """Held shared by ``accel checkpoints`` readers of ``series``; retention removes
    nothing of the series while a reader holds it (it catches up at a later save)."""
    return lock_file(root, f"{READERS_LOCK_PREFIX}{series}")


def run_lock(root: Path, run_id: str) -> Path:
    """Held by a live ``accel launch`` for its whole run."""
    return lock_file(root, f"{RUN_LOCK_PREFIX}{run_id}")


@dataclass(frozen=True)
class Layout:
    """Every path of one workspace: ``root`` is the ``.accelerate`` folder, ``data`` where
    its data lives (the root itself unless ``workspace.path`` moves it)."""

    root: Path
    data: Path

    @property
    def relocated(self) -> bool:
        return os.path.normpath(self.root) != os.path.normpath(self.data)

    @property
    def layout_file(self) -> Path:
        return self.root / LAYOUT_FILE

    @property
    def data_marker(self) -> Path:
        return self.data / DATA_MARKER

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_DIR / CONFIG_NAME

    @property
    def locks_dir(self) -> Path:
        return self.root / LOCKS_DIR

    def lock(self, name: str) -> Path:
        return lock_file(self.root, name)

    @property
    def settled_runs_file(self) -> Path:
        return self.locks_dir / SETTLED_RUNS

    @property
    def state_file(self) -> Path:
        return self.data / STATE_FILE

    @property
    def cache_dir(self) -> Path:
        return self.data / CACHE_DIR

    @property
    def entries_dir(self) -> Path:
        return self.cache_dir / ENTRIES_DIR

    @property
    def checkpoints_dir(self) -> Path:
        return self.data / CHECKPOINTS_DIR

    @property
    def logs_dir(self) -> Path:
        return self.data / LOGS_DIR

    @property
    def runs_dir(self) -> Path:
        return self.logs_dir / RUNS_DIR

    @property
    def tmp_dir(self) -> Path:
        return self.data / TMP_DIR

    def folders(self) -> tuple[Path, ...]:
        """What :func:`establish` creates."""
        return (
            self.root / CONFIG_DIR,
            self.locks_dir,
            self.cache_dir,
            self.checkpoints_dir,
            self.runs_dir,
            self.tmp_dir,
        )


# -- folders in flight ---------------------------------------------------------------------


def make_owned_dir(path: Path, *, parents: bool = False) -> Path:
    """Create ``path`` (which must not exist) with the owner marker in it, first thing."""
    path.mkdir(parents=parents)
    with open(path / OWNER_MARKER, "xb"):
        pass
    return path


def mark(path: Path) -> None:
    """Give a folder accel has proved its own (by its record) the owner marker too.

    Whatever else stands at the marker's name (a link, a FIFO: hand-made, never
    accel's) is replaced, never opened: opening it would follow the link out of the
    workspace and create its target there, or wait for a FIFO's reader forever.
    """
    if os.path.islink(path) or not os.path.isdir(path):
        raise NotADirectoryError(f"{path} is not a folder of its own")
    marker = path / OWNER_MARKER
    for _ in range(2):
        with contextlib.suppress(FileNotFoundError):
            found = os.lstat(marker).st_mode
            if stat.S_ISREG(found):
                return
            if stat.S_ISDIR(found):
                raise IsADirectoryError(f"{marker} is a folder, not accel's owner marker")
            os.unlink(marker)
        # "x" (O_EXCL), as make_owned_dir makes it: a link made beside us fails it, and
        # whatever stands there then is looked at again
        with contextlib.suppress(FileExistsError), open(marker, "xb"):
            return
    raise FileExistsError(f"{marker} keeps changing; is another program writing here?")


def is_owned(path: Path) -> bool:
    """True when ``path`` is a real folder holding accel's owner marker (a file: a link
    there proves nothing)."""
    if os.path.islink(path):
        return False
    try:
        return stat.S_ISREG(os.lstat(path / OWNER_MARKER).st_mode)
    except OSError:
        return False


def is_empty_dir(path: Path) -> bool:
    try:
        return not os.path.islink(path) and not os.listdir(path)
    except OSError:
        return False


def is_atomic_temp(name: str) -> bool:
    """An interrupted :func:`accel._fs.atomic_write` (mkstemp adds 8 random characters)."""
    return name.startswith(TMP_PREFIX) and len(name) == len(TMP_PREFIX) + 8


def detach(path: Path, *, durable: bool = True) -> Path:
    """Rename the folder ``path`` to a ``.del-*`` sibling: its deletion has begun, and
    nothing will see it under its name again. The caller has proved the folder accel's;
    it gets the owner marker (if it was made before markers) so that a removal killed
    half-way still proves it. Then :func:`dispose`, after an fsync of the folder
    (``durable``, or the caller's own), so no power loss brings back a half-removed item.
    A rename never follows a link: a link is moved, never its target.
    """
    mark(path)
    doomed = path.parent / f"{DELETED_PREFIX}{os.urandom(6).hex()}"
    os.rename(path, doomed)
    if durable:
        fsync_dir(path.parent)
    return doomed


def dispose(path: Path, device: int | None = None) -> int:
    """Remove a detached folder, its proof files last, never following a link.

    A kill half-way leaves a ``.del-*`` folder that still proves it is accel's.
    Returns how many paths stayed (on another filesystem).
    """
    return remove_tree(path, device, last=PROOF_FILES)


# -- what accel did not make, inside its own folders -----------------------------------------


def run_file(rel: str) -> bool:
    """A path inside a run folder (``/``-separated) that accel writes there."""
    base = rel.rpartition("/")[2]
    return bool(RUN_FILE_RE.fullmatch(rel)) or rel == OWNER_MARKER or is_atomic_temp(base)


def foreign_files(folder: Path, own: Callable[[str], bool]) -> list[str]:
    """What ``own`` (an allowlist of relative, ``/``-separated paths) does not accept
    under ``folder``: files, links and anything else but folders, which are entered
    (never through a link), and a folder at the name of one of accel's files (accel
    made a file there). Sorted; [] when everything there is accel's."""
    return sorted(rel for rel, is_dir in _tree(folder) if is_dir == own(rel))


def remove_own(folder: Path, own: Callable[[str], bool], first: Sequence[str]) -> None:
    """Remove accel's files from ``folder`` and keep the folder with the files it did not
    make. ``first`` (the owner marker, then the record that proves the item) goes before
    anything else: from the first unlink on, the folder is neither a valid item nor
    provably accel's debris, so no reader takes it for one and no clean deletes it.
    Then the rest of accel's files, then the folders they leave empty. Never follows a link.
    """
    for name in first:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):  # a folder: kept
            os.unlink(folder / name)
    folders = []
    for rel, is_dir in list(_tree(folder)):
        if is_dir:
            folders.append(rel)
        elif own(rel):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(folder / rel)
    for rel in sorted(folders, key=lambda r: r.count("/"), reverse=True):
        with contextlib.suppress(OSError):  # not empty: it holds what accel did not make
            os.rmdir(folder / rel)


def _tree(folder: Path) -> Iterator[tuple[str, bool]]:
    """(relative path, is a folder) of everything under ``folder``, links not followed."""
    top = os.fspath(folder)
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(top, rel) if rel else top) as it:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        except OSError:
            continue
        for name, is_dir in entries:
            yield rel + name, is_dir
            if is_dir:
                stack.append(f"{rel}{name}/")
