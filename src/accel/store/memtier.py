"""The memory tier: each rank's newest snapshots, in shared memory the launcher owns.

::

    <ACCEL_SHM_DIR or /dev/shm>/accel-<run id>/  made by accel launch (0700), gone at its end
        owner                                   the launcher's pid (a dead one's folder is swept)
        persisted                               the newest step the launcher committed
        rank-<N>/slot-0/ ... slot-2/            three slots a rank: the newest whole snapshots
                                                stay whole while the next one is written
        rank-<N>/slot-keep/                     a step to persist, kept until it is committed
            state.tensors                       rank 0: the replicated state, as in a checkpoint
            rank-<N>.tensors                    the rank's own state (its RNG)
            meta.json                           written last: step, series, files' digests
        restore/rank-<N>/                       after a failure: the slots of the step just
                                                committed, which the restarted workers map
                                                (accel.store.persister); gone once the new
                                                attempt holds a step of its own whole

A worker (:class:`SlotWriter`) writes a snapshot into the slot that does not hold its
newest one: it removes that slot's ``meta.json`` first, then writes the files and
``meta.json`` last. The files live in the launcher's folder, not in the worker: a
snapshot outlives the worker that took it.

A file the worker wrote before is rewritten in place when nothing else holds it
(:mod:`accel.store._inplace`): a file the launcher is reading (it holds a shared lock)
or that ``slot-keep`` links is left to its holder, and a new file takes its name.

The launcher (:class:`accel.store.persister.Persister`) commits the newest step that
every rank holds whole as a normal checkpoint
(:meth:`accel.store.checkpoints.Checkpoints.commit_files`): every
``checkpoints.persist_every`` steps on a thread of its own (not the training process's
GIL), and when a worker fails (tag ``failure``; beside the restart). A worker
writes no checksum (the copy into memory is its one pass over the bytes): the launcher
opens a step's files, takes their shared locks, checks that the slots still hold that
step with the very files it opened (a writer removes ``meta.json`` before it touches a
file, and rewrites one in place only under its exclusive lock, so what it opened and
locked is whole and stays so), and hashes them while it copies them to disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._fs import atomic_write_json, read_json, remove_tree
from accel.config.resolve import snapshot_problem
from accel.errors import AccelError, TierFull, UsageError
from accel.layout import SNAPSHOT_META, rank_name
from accel.store._inplace import InPlaceFiles
from accel.store.manifest import STATE_TENSORS, TENSORS_SUFFIX
from accel.store.series import is_series_name

__all__ = [
    "DIR_ENV",
    "SlotWriter",
    "TierFull",
    "common_steps",
    "make_tier",
    "remove_tier",
    "snapshot_settings",
    "whole_steps",
]

DIR_ENV = "ACCEL_SNAPSHOT_DIR"  # set by accel launch for every worker when the tier is on
BASE_ENV = "ACCEL_SHM_DIR"  # where the tier's folder goes (a tmpfs); /dev/shm by default
# Three: a rank never overwrites the newest step every rank holds whole, nor a newer one
# (SlotWriter._next_slot), so one slot keeps that step, one takes the write in progress,
# and a third lets a rank's writer run a snapshot ahead of the slowest rank's.
SLOTS = ("slot-0", "slot-1", "slot-2")
KEEP = "slot-keep"  # a step to persist: not overwritten before the launcher committed it
META = SNAPSHOT_META
OWNER = "owner"
PERSISTED = "persisted"  # the launcher's: the newest step it committed
RESTORE = "restore"  # the slots of the step committed at a failure (accel.store.persister)
PREFIX = "accel-"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_META_LIMIT = 1 << 20
HEADROOM = 64 << 20  # left free in the tmpfs beyond the two slots: others use it too


def snapshot_settings(settings: Any) -> tuple[int | None, int | None]:
    """(``snapshot_every``, ``persist_every``) of a :class:`CheckpointSettings`, checked
    together: a persisted step must be a snapshot's (the config's one rule)."""
    every, persist = settings.snapshot_every, settings.persist_every
    problem = snapshot_problem(every, persist)
    if problem is not None:
        raise UsageError(problem)
    return every, persist


def base_dir() -> Path:
    # absolute: the workers find the tier by this path whatever folder they run in
    return Path(os.path.abspath(os.environ.get(BASE_ENV) or "/dev/shm"))


def check_base() -> Path:
    """The folder the tier goes in, checked before a run makes anything: a mistyped
    ``ACCEL_SHM_DIR``, or a machine without ``/dev/shm``, is one line (exit 2)."""
    base = base_dir()
    if not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):  # neither raises
        raise UsageError(_base_message(base, "is not a folder this user can write"))
    return base


def _base_message(base: Path, what: str) -> str:
    named = f"{BASE_ENV}={base}" if os.environ.get(BASE_ENV) else str(base)
    return (
        f"checkpoints.snapshot_every keeps snapshots in {named}, which {what}: set "
        f"{BASE_ENV} to a tmpfs folder you can write, or unset checkpoints.snapshot_every"
    )


def make_tier(run_id: str) -> Path:
    """The launcher's folder for the run's snapshots (0700, its pid inside)."""
    if _RUN_ID.fullmatch(run_id) is None:
        raise ValueError(f"not a run id: {run_id!r}")
    base = check_base()
    sweep_dead(base)
    path = base / (PREFIX + run_id)
    try:
        path.mkdir(mode=0o700)
    except OSError as exc:  # /proc, a read-only or full file system: its own words
        raise UsageError(_base_message(base, f"refuses a folder ({exc.strerror})")) from None
    (path / OWNER).write_text(str(os.getpid()))
    return path


def remove_tier(path: Path) -> None:
    with contextlib.suppress(OSError):
        remove_tree(path)


def sweep_dead(base: Path) -> list[Path]:
    """Remove the tiers of launchers that died without removing them (SIGKILL); only
    folders named as accel names them, holding only an ``owner`` of a dead pid, are ours."""
    gone = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            if _RUN_ID.fullmatch(entry.name[len(PREFIX) :]) is None:
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != os.getuid():
                    continue  # another user's
                pid = int(Path(entry.path, OWNER).read_text()[:20])
            except (OSError, ValueError):
                continue
            if pid > 0 and not _alive(pid):
                remove_tier(Path(entry.path))
                gone.append(Path(entry.path))
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def files_of(rank: int) -> tuple[str, ...]:
    """The files a rank's snapshot holds: the allowlist a reader accepts."""
    own = rank_name(rank, TENSORS_SUFFIX)
    return (STATE_TENSORS, own) if rank == 0 else (own,)


# -- the worker's side ----------------------------------------------------------------------


class SlotWriter:
    """One rank's two slots in the launcher's folder."""

    def __init__(self, tier: Path, rank: int, world_size: int = 1) -> None:
        self.tier = tier
        self.rank = rank
        self.world_size = max(world_size, rank + 1)
        self.folder = tier / rank_name(rank)
        for slot in (*SLOTS, KEEP):
            (self.folder / slot).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._files = InPlaceFiles()  # the files it wrote, rewritten in place

    def free_bytes(self) -> int:
        """What the tmpfs can still take, counting the slot the next write replaces."""
        st = os.statvfs(self.tier)
        reusable = _size(self.folder / self._next_slot())
        return st.f_bavail * st.f_frsize + reusable

    def _next_slot(self, wait: float = 0.0) -> str:
        """The slot to write next: never the newest step every rank holds whole, nor one
        newer (the others may not have it yet), so that a step every rank holds whole is
        always there, however far apart the ranks' writers are when one dies. Read with
        the others' slots changing: a stale view only keeps more. When every slot is
        that new, wait (up to ``wait`` seconds) for the others to catch up; then the
        oldest goes."""
        deadline = time.monotonic() + wait
        while True:
            free, oldest = self._free_slot()
            if free is not None:
                return free
            if time.monotonic() >= deadline:
                return oldest
            time.sleep(0.002)

    def ready(self, names: Iterable[str]) -> str | None:
        """The slot (for :meth:`write`) where the files ``names`` go at memory speed now, or
        None: free without waiting for the other ranks (they only ever free more), over
        files this writer wrote there and nothing else links (a new file costs four to
        five times as much: accel.store._inplace)."""
        free = self._free_slot()[0]
        if free is None or not all(self._files.holds(self.folder / free / n) for n in names):
            return None
        return free

    def _free_slot(self) -> tuple[str | None, str]:
        """A slot :meth:`_next_slot` may write now (None: none), and the oldest one."""
        found = slots(self.tier, self.world_size)
        mine = {slot.path.name: slot.step for slot in found.get(self.rank, [])}
        empty = [name for name in SLOTS if name not in mine]
        if empty:
            return empty[0], empty[0]
        oldest = min(SLOTS, key=mine.__getitem__)
        floor = max(whole_steps(found, self.world_size), default=-1)
        older = [name for name in SLOTS if mine[name] < floor]
        return (oldest if older else None), oldest

    def write(
        self,
        step: int,
        series: str,
        trees: dict[str, Any],
        *,
        keep: float | None = None,
        wait: float = 0.0,
        written: Callable[[], bool] | None = None,
        slot: str | None = None,
    ) -> bool:
        """Write ``trees`` (file name -> tree) as the snapshot of ``step``; whether it was.

        ``written``: called once the files are written, before the slot names its step;
        false: the snapshot is dropped (a tensor it read changed meanwhile). ``slot``: the
        slot :meth:`ready` found, instead of looking again.

        ``wait``: how long to wait for the other ranks when every slot holds a step they
        may not have (:meth:`_next_slot`). ``keep``: a step the launcher persists: once
        written, its files are also linked into the slot that is kept until the launcher
        committed it, after waiting (up to ``keep`` seconds) for the launcher to commit
        the one there before. (Written into that slot instead, a due step replaced a
        rank's only copy of the newest step every rank held whole: with persist_every
        equal to snapshot_every, a SIGKILL lost a step more.)
        :class:`TierFull` when shared memory runs out:
        the slot is left empty, the newest complete snapshot stays."""
        folder = self.folder / (slot or self._next_slot(wait))
        meta = self._write_slot(folder, step, series, trees, written)
        if meta is None:
            return False
        if keep is not None:
            kept = self.folder / KEEP
            self._wait_persisted(kept, keep)
            try:
                self._link(folder, kept, meta)
            except OSError:
                _empty(kept)
                raise
        return True

    def _link(self, slot: Path, kept: Path, meta: dict[str, Any]) -> None:
        """``slot``'s files in ``kept`` too (the same inodes: no bytes copied), its
        ``meta.json`` last; a writer never changes a file in place, it unlinks it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(kept / META)  # first: from now on this slot is no snapshot
        _empty(kept)
        for name in meta["files"]:
            os.link(slot / name, kept / name)
        atomic_write_json(kept / META, meta, durable=False)

    def _write_slot(
        self,
        slot: Path,
        step: int,
        series: str,
        trees: dict[str, Any],
        written: Callable[[], bool] | None = None,
    ) -> dict[str, Any] | None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(slot / META)  # first: from now on this slot is no snapshot
        for entry in os.scandir(slot):
            if entry.name not in trees:
                self._files.drop(Path(entry.path))
                os.unlink(entry.path)
        files = {}
        try:
            for name, tree in trees.items():
                files[name] = {"size": self._files.write(slot / name, tree)}
            if written is not None and not written():
                self._clear(slot, trees)
                return None
            meta = {"step": step, "series": series, "rank": self.rank, "files": files}
            atomic_write_json(slot / META, meta, durable=False)
        except OSError as exc:  # a WriteFailed is an OSError too
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
            self._clear(slot, trees)
            if getattr(cause, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                raise TierFull(full_message(self.tier)) from None
            raise
        return meta

    def _clear(self, slot: Path, trees: dict[str, Any]) -> None:
        for name in trees:
            self._files.drop(slot / name)
        _empty(slot)

    def close(self) -> None:
        """Let go of the files it wrote (they stay in the tier for the launcher)."""
        self._files.close()

    def _wait_persisted(self, slot: Path, timeout: float) -> None:
        """Until the launcher committed the step ``slot`` holds (or ``timeout`` passed: a
        launcher that cannot commit must not stop training; that step is then lost)."""
        held = read_slot(slot, self.rank)
        if held is None:
            return
        deadline = time.monotonic() + timeout
        while persisted_step(self.tier) < held.step and time.monotonic() < deadline:
            time.sleep(0.005)


def _empty(slot: Path) -> None:
    for entry in os.scandir(slot):
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


def persisted_step(tier: Path) -> int:
    """The newest step the launcher committed from ``tier`` (-1: none)."""
    try:
        text = (tier / PERSISTED).read_text()[:24]
        return int(text)
    except (OSError, ValueError):
        return -1


def full_message(tier: Path, needed: int | None = None, persist: int | None = None) -> str:
    """One line: what the tier cannot hold, and what is saved instead (``persist``:
    ``checkpoints.persist_every``; without it, nothing but the script's own saves)."""
    need = "" if needed is None else f" ({needed / (1 << 20):.0f} MiB needed)"
    instead = (
        f"every {persist}th step is saved to disk, blocking, instead"
        if persist
        else "no snapshot is kept, so a crash costs the steps since the last save_state"
    )
    return (
        f"accel: shared memory at {tier.parent} cannot hold the snapshots{need}; {instead} "
        f"(free memory there, or set {BASE_ENV} to a larger tmpfs)"
    )


def headroom(free: int) -> int:
    """What the tier leaves free for others (DataLoader workers' tensors, NCCL): a quarter
    of what is free, at most :data:`HEADROOM` (a 64 MiB /dev/shm, Docker's default, holds
    the snapshots of a small model too)."""
    return min(HEADROOM, free // 4)


def _size(path: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_size
    return total


# -- the launcher's side --------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """A rank's complete snapshot of one step, as its ``meta.json`` describes it."""

    rank: int
    step: int
    series: str
    path: Path
    files: dict[str, dict[str, Any]]


def read_slot(folder: Path, rank: int) -> Slot | None:
    """The slot's snapshot, or None when it holds none whole (or holds what no accel
    worker writes: a hand-edited or hostile ``meta.json`` is data, and refused)."""
    try:
        meta = read_json(folder / META, limit=_META_LIMIT)
    except (OSError, ValueError, AccelError):
        return None
    if not isinstance(meta, dict) or set(meta) != {"step", "series", "rank", "files"}:
        return None
    step, series, files = meta["step"], meta["series"], meta["files"]
    if type(step) is not int or step < 0 or meta["rank"] != rank:
        return None
    if not isinstance(series, str) or not is_series_name(series):
        return None
    if not isinstance(files, dict) or set(files) != set(files_of(rank)):
        return None
    for digest in files.values():
        if not isinstance(digest, dict) or set(digest) != {"size"}:
            return None
        if type(digest["size"]) is not int or digest["size"] < 0:
            return None
    return Slot(rank, step, series, folder, files)


def slots(tier: Path, world_size: int) -> dict[int, list[Slot]]:
    """Every rank's complete snapshots (up to four each)."""
    found: dict[int, list[Slot]] = {}
    for rank in range(world_size):
        for name in (*SLOTS, KEEP):
            slot = read_slot(tier / rank_name(rank) / name, rank)
            if slot is not None:
                found.setdefault(rank, []).append(slot)
    return found


def common_steps(tier: Path, world_size: int) -> dict[int, dict[int, Slot]]:
    """Steps that every rank holds whole, each with its ranks' slots, newest last."""
    return whole_steps(slots(tier, world_size), world_size)


def whole_steps(found: dict[int, list[Slot]], world_size: int) -> dict[int, dict[int, Slot]]:
    """Of ``rank -> its slots``, the steps every rank holds (in one series), newest last."""
    if len(found) < world_size:
        return {}
    by_step: dict[int, dict[int, Slot]] = {}
    for rank, held in found.items():
        for slot in held:
            by_step.setdefault(slot.step, {})[rank] = slot
    whole = {
        step: ranks
        for step, ranks in by_step.items()
        if len(ranks) == world_size and len({s.series for s in ranks.values()}) == 1
    }
    return dict(sorted(whole.items()))
