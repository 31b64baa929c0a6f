"""The memory tier's snapshots on their way to disk, and back after a failure.

The workers write the tier (:class:`accel.store.memtier.SlotWriter`; its layout and
protocol are :mod:`accel.store.memtier`'s). The launcher's :class:`Persister` commits
the newest step every rank holds whole as a normal checkpoint: every
``checkpoints.persist_every`` steps on a thread of its own, and at a failure (tag
``failure``).

Before a restart, that step's slots move to ``<tier>/restore/rank-N`` instead of being
deleted, and the launcher commits the step beside the restart (its rendezvous, the
workers' fork, process group and model run meanwhile), holding an exclusive ``flock``
on ``<tier>/committing`` until the checkpoint is on disk (:func:`hold_commit`). A worker
looks for a checkpoint once it is done (:func:`await_commit`), so it finds that one,
and :func:`load_file` maps its files from ``restore/``, in shared memory, instead of
reading them back from the disk the launcher wrote them to a moment before.

The checkpoint on disk stays the authority: a file is taken from memory only when its
slot names that checkpoint's step and series and its size is the manifest's, and it is
verified against the manifest's checksum like a file on disk (that checksum was computed
from these very bytes as the launcher copied them). Anything else (no tier, another
step, a file that fails its checksum) loads from the disk, as before. Once every rank
has read (``load_state()``'s agreement), rank 0 removes ``restore/`` (:func:`release`): the
new attempt's snapshots get the shared memory it held; what the ranks mapped stays
theirs until they let go of it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel._fs import atomic_write, remove_tree
from accel.errors import AccelError
from accel.layout import rank_name
from accel.store.manifest import STATE_TENSORS, TENSORS_SUFFIX
from accel.store.memtier import (
    DIR_ENV,
    PERSISTED,
    RESTORE,
    Slot,
    common_steps,
    read_slot,
    remove_tier,
    whole_steps,
)
from accel.store.series import Found
from accel.store.tensorfile import load_tensor_file

GONE = ".gone-"  # + rank: a dead attempt's folder, removed by the commit beside a restart

__all__ = ["Persister", "await_commit", "hold_commit", "load_file", "release", "tier_copy"]


class Persister:
    """The launcher's writer: commits whole steps of the memory tier as checkpoints."""

    def __init__(
        self,
        tier: Path,
        commit: Callable[..., Any],
        world_size: int,
        every: int | None,
        *,
        run_id: str | None = None,
        poll: float = 0.05,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.tier = tier
        self.run_id = run_id
        self._commit = commit
        self.world_size = world_size
        self.every = every
        self.poll = poll
        self.notify = notify or (lambda _: None)
        self.persisted: list[tuple[int, str]] = []  # (step, tag) committed, in order
        self._last = -1
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._behind: threading.Thread | None = None  # commit_behind's

    def start(self) -> Persister:
        if self.every is not None:
            self._thread = threading.Thread(target=self._main, name="accel-persist", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._behind):
            if thread is not None:
                thread.join()

    def _main(self) -> None:
        while not self._stop.wait(self.poll):
            with contextlib.suppress(Exception):  # a torn slot: the next poll tries again
                self.persist_due()

    def persist_due(self) -> int | None:
        """Commit the oldest whole step that is a multiple of ``every`` and not committed
        yet. Oldest first: each is in slot-keep until committed, while the next may
        already be whole in the rotating slots (a fast loop writes five steps between two
        polls); the newest first would skip it."""
        every = self.every
        if every is None:
            return None
        common = self._common()
        due = [step for step in common if step % every == 0 and step > self._last]
        return self._persist(due[0], common[due[0]], "snapshot") if due else None

    def persist_newest(self, tag: str = "failure") -> int | None:
        """At a failure (or a stop: ``tag`` ``stopped``): commit the newest step every rank
        holds whole; the step, or None when there is none newer than the last committed."""
        with self._lock:
            return self._persist_newest(tag)

    def _persist_newest(self, tag: str = "failure") -> int | None:
        common = self._common()
        for step in reversed(common):  # a slot rewritten meanwhile: the one before
            try:
                return self._persist_locked(step, common[step], tag, self._held(step))
            except (OSError, AccelError) as exc:
                self.notify(f"accel: could not persist the snapshot of step {step}: {exc}")
        return None

    def commit_behind(self, said: Callable[[int, bool], None]) -> bool:
        """At a failure, before a restart: the newest step every rank holds whole moves to
        ``restore/`` (the dead attempt's other snapshots go) and a thread commits it (tag
        ``failure``; ``said(step, True)`` once it is) while the restart goes on: the new
        workers' rendezvous, fork, process group and model run beside the copy to disk.
        They look for a checkpoint once it is done: ``<tier>/committing`` stays locked
        until then (:func:`await_commit`). Whether a step was kept
        for them (if it could not be moved, it was committed first, here, as before)."""
        self._lock.acquire()  # from here to the commit's end, on whichever thread
        handed = False
        try:
            remove_tier(self.tier / RESTORE)
            common = self._common()
            newer = [step for step in common if step > self._last]
            if not newer:
                return False
            try:
                committing = hold_commit(self.tier)  # before the workers can look
            except OSError:
                committing = None
            if committing is None or not self._keep(common[newer[-1]]):
                if committing is not None:
                    committing.close()
                if self._persist_newest() is not None:
                    said(self._last, False)
                return False
            aside = [self._set_aside(rank) for rank in range(self.world_size)]
            self._behind = threading.Thread(
                target=self._commit_kept,
                args=(newer[-1], committing, said, aside),
                name="accel-persist-failure",
                daemon=True,
            )
            self._behind.start()
            handed = True
            return True
        finally:
            if not handed:
                self._remove_ranks()
                self._lock.release()

    def _set_aside(self, rank: int) -> Path:
        """Rename the rank's folder out of the workers' way (they write a new one); its
        removal, which frees its shared memory page by page (0.02 s), is the thread's."""
        folder, aside = self.tier / rank_name(rank), self.tier / f"{GONE}{rank}"
        remove_tier(aside)
        try:
            os.rename(folder, aside)
        except FileNotFoundError:
            pass
        except OSError:
            remove_tier(folder)
        return aside

    def _commit_kept(
        self, step: int, committing: Any, said: Callable[[int, bool], None], aside: list[Path]
    ) -> None:
        """commit_behind's thread: it holds the lock and ``committing``, and lets go."""
        done = None
        try:
            ranks = self._kept()
            if ranks is None:
                raise OSError(errno.ENOENT, "it is no longer in restore/")
            done = self._persist_locked(step, ranks, "failure", self._kept)
        except (OSError, AccelError) as exc:
            self.notify(f"accel: could not persist the snapshot of step {step}: {exc}")
        finally:
            committing.close()  # the workers waiting for it go on
            for folder in aside:  # before their first snapshot, a step away
                remove_tier(folder)
            self._lock.release()
        if done is not None:
            said(done, True)

    def _common(self) -> dict[int, dict[int, Slot]]:
        return common_steps(self.tier, self.world_size)

    def _held(self, step: int) -> Callable[[], dict[int, Slot] | None]:
        return lambda: self._common().get(step)

    def _kept(self) -> dict[int, Slot] | None:
        """The slots in ``restore/`` when they hold one step whole."""
        kept = {r: read_slot(self.tier / RESTORE / rank_name(r), r) for r in range(self.world_size)}
        common = whole_steps({r: [s] for r, s in kept.items() if s is not None}, self.world_size)
        return next(iter(common.values())) if common else None

    def _persist(self, step: int, ranks: dict[int, Slot], tag: str) -> int | None:
        """Commit ``step`` from the slots ``ranks`` (as the caller read them: if they were
        rewritten since, the check after opening refuses them)."""
        with self._lock:
            return self._persist_locked(step, ranks, tag, self._held(step))

    def _persist_locked(
        self,
        step: int,
        ranks: dict[int, Slot],
        tag: str,
        held: Callable[[], dict[int, Slot] | None],
    ) -> int | None:
        """:meth:`_persist` under the lock; ``held()``: where the slots of ``step`` are now."""
        if step <= self._last:
            return None
        with contextlib.ExitStack() as stack:
            files = {
                name: (stack.enter_context(open(slot.path / name, "rb")), digest["size"])
                for slot in ranks.values()
                for name, digest in slot.files.items()
            }
            for handle, _ in files.values():
                try:  # held until committed: no writer rewrites a locked file in place
                    fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise OSError(
                        errno.EAGAIN, f"the snapshot of step {step} is being rewritten"
                    ) from None
            # A writer removes meta.json before it touches a file, and rewrites one in
            # place only under its exclusive lock: a slot that still names this step
            # holding the very files opened and locked (the same inodes: slot-keep
            # links them) means what was opened is the snapshot whole, whatever happens
            # to the slots from now on.
            if _inodes(held()) != {
                (rank, name): os.fstat(files[name][0].fileno()).st_ino
                for rank, slot in ranks.items()
                for name in slot.files
            }:
                raise OSError(errno.EAGAIN, f"the snapshot of step {step} was rewritten")
            series = next(iter(ranks.values())).series
            self._commit(step, series, files, self.world_size, tag, self.run_id)
        self._last = step  # committed: whatever the tier can still take
        try:
            atomic_write(self.tier / PERSISTED, str(step), durable=False)  # the slot is free
        except OSError:
            # a full tier: the workers keep that slot until the next step committed says
            # so; the step is not committed again, nor an older one in its place
            pass
        self.persisted.append((step, tag))
        return step

    @property
    def newest(self) -> int | None:
        """The newest step this launcher committed (None: none yet)."""
        return self._last if self._last >= 0 else None

    def clear(self, keep: int | None = None) -> bool:
        """Before a restart: the dead attempt's snapshots go (a nondeterministic run's
        new attempt must never mix its steps with theirs), but for the slots of ``keep``,
        a step committed: they move to ``restore/``, where the new attempt's workers map
        that checkpoint's files from memory (:func:`load_file`). Whether it did."""
        with self._lock:
            remove_tier(self.tier / RESTORE)
            kept = keep is not None and self._keep(self._common().get(keep))
            self._remove_ranks()
            return kept

    def _remove_ranks(self) -> None:
        for rank in range(self.world_size):
            remove_tier(self.tier / rank_name(rank))

    def _keep(self, ranks: dict[int, Slot] | None) -> bool:
        """Move the slots ``ranks`` (one step's, as just read) to ``restore/``."""
        if ranks is None:
            return False
        staging = self.tier / f"{RESTORE}.new"
        remove_tier(staging)
        moved: list[tuple[Path, Path]] = []
        try:
            staging.mkdir(mode=0o700)
            for rank, slot in ranks.items():
                os.rename(slot.path, staging / rank_name(rank))
                moved.append((staging / rank_name(rank), slot.path))
            os.rename(staging, self.tier / RESTORE)
        except OSError:
            for there, home in moved:  # back where a commit finds them
                with contextlib.suppress(OSError):
                    os.rename(there, home)
            remove_tier(staging)  # the workers load it from the disk
            return False
        return True

    def drop_restored(self) -> bool:
        """Remove ``restore/`` once the new attempt holds a step of its own whole (its
        workers loaded what they needed before their first snapshot); True when done."""
        if self._behind is not None and self._behind.is_alive():
            return False  # still being committed
        if not (self.tier / RESTORE).exists():
            return True
        if not self._common():
            return False
        remove_tier(self.tier / RESTORE)
        return True


def _inodes(ranks: dict[int, Slot] | None) -> dict[tuple[int, str], int] | None:
    """The inode of every file of ``ranks``' slots now (None: no such step, or a slot
    rewritten while it is read)."""
    if ranks is None:
        return None
    try:
        return {
            (rank, name): os.stat(slot.path / name).st_ino
            for rank, slot in ranks.items()
            for name in slot.files
        }
    except OSError:
        return None


# -- the restarted workers' side -------------------------------------------------------


COMMITTING = "committing"  # in the tier, locked while the launcher commits a failure's step
_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_RANK_FILE = re.compile(rf"rank-(0|[1-9][0-9]{{0,8}}){re.escape(TENSORS_SUFFIX)}")


def load_file(found: Found, name: str, map_location: Any = "cpu") -> Any:
    """The tree of ``name`` in checkpoint ``found`` (which lists it), from the memory tier
    when it holds that checkpoint's bytes, else from the disk; verified either way."""
    digest = found.manifest.files[name]
    copy = tier_copy(found, name)
    if copy is not None:
        try:
            return load_tensor_file(copy, digest, map_location)
        except (AccelError, OSError):
            pass  # only ever a faster way to the same bytes: the disk has them
    return load_tensor_file(found.path / name, digest, map_location)


def tier_copy(found: Found, name: str) -> Path | None:
    """Where the memory tier holds ``name`` of ``found`` (None: it does not)."""
    tier = os.environ.get(DIR_ENV)
    match = _RANK_FILE.fullmatch(name)
    rank = 0 if name == STATE_TENSORS else int(match.group(1)) if match else None
    if not tier or rank is None:
        return None
    folder = Path(tier) / RESTORE / rank_name(rank)
    slot = read_slot(folder, rank)
    digest = found.manifest.files.get(name)
    if slot is None or digest is None or name not in slot.files:
        return None
    if (slot.step, slot.series) != (found.manifest.step, found.manifest.series):
        return None
    return folder / name if slot.files[name]["size"] == digest.size else None


def release() -> None:
    """Remove the tier's ``restore/`` (a restarted rank 0, once every rank has read)."""
    tier = os.environ.get(DIR_ENV)
    if tier:
        with contextlib.suppress(OSError):
            remove_tree(Path(tier) / RESTORE)


class Commit:
    """The launcher's hold on ``<tier>/committing`` (:func:`hold_commit`)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    def close(self) -> None:
        """Done (committed or not): the workers waiting for it go on."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)


def hold_commit(tier: Path) -> Commit:
    """Lock ``<tier>/committing`` before a restart's workers start (they wait for it)."""
    path = tier / COMMITTING
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, str(os.getpid()).encode())
    except OSError:
        os.close(fd)
        raise
    return Commit(path, fd)


def await_commit() -> None:
    """Before a worker looks for a checkpoint: wait while its launcher commits the
    snapshot of a failure (:func:`hold_commit`); at once when it does not."""
    tier = os.environ.get(DIR_ENV)
    if not tier:
        return
    try:
        fd = os.open(Path(tier) / COMMITTING, os.O_RDONLY | _OPEN)
    except OSError:
        return  # none in progress
    try:
        # The launcher's own environment names the tier for its workers: it never waits
        # for itself (its commit lists the series for retention).
        if os.read(fd, 16) != str(os.getpid()).encode():
            fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        pass  # not a file the launcher locked: nothing to wait for
    finally:
        os.close(fd)
