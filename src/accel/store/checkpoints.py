"""Checkpoints: training state committed whole or not at all.

::

    checkpoints/<series>/step-<step:012d>/   one committed checkpoint
        state.tensors                       replicated state, written by rank 0
        rank-<N>.tensors                    per-rank state (RNG), when given
        sharded/                            torch.distributed.checkpoint files, when given
        .accel-owned                        created first: the folder is accel's
        manifest.json                       written last: it makes the folder a checkpoint

Commit protocol: every file is written under ``.tmp-<step>-<id>/``, hashed while it
is written (xxh3-64) and fsynced; then ``manifest.json`` (:mod:`accel.store.manifest`)
is written into that folder, the folder is renamed to ``step-<step>`` and the series
folder is fsynced (:func:`accel.store.series.commit`). Re-saving an existing step
swaps the folders so that one whole copy of the step is visible at every instant. A
kill at any instant leaves the previous checkpoints whole and the new one committed or invisible.

Deleting (retention, ``delete``, ``accel clean``) renames the folder to ``.del-*`` and
fsyncs that before a single file goes, the manifest last. Loading verifies sizes and
checksums and unpickles nothing (see ``accel.store.tensorfile``). A folder whose
manifest is damaged is no checkpoint: listing skips it, loading it raises
:class:`~accel.errors.IntegrityError`, and the rest of the series is unaffected.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from accel import _faults
from accel.config.views import CheckpointSettings
from accel.errors import IntegrityError, UsageError, WriteFailed, write_failed
from accel.identity import ensure
from accel.layout import (
    MANIFEST,
    Layout,
    dispose,
    make_owned_dir,
    rank_name,
)
from accel.store import series as series_mod
from accel.store import sharded as sharded_mod
from accel.store._trace import phase
from accel.store.async_save import AsyncSave, SaveThreads, Snapshot, SnapshotPool
from accel.store.collectives import (
    DistContext,
    GroupSlot,
    arrive_later,
    attempt,
    collect,
    current_context,
    on_every_rank,
)
from accel.store.lease import SeriesLease, apply_retention, ensure_lease
from accel.store.manifest import STATE_TENSORS, TENSORS_SUFFIX, parse_manifest, read_manifest
from accel.store.persister import await_commit, load_file
from accel.store.series import (
    Found,
    Reaper,
    Unreadable,
    check_series,
    check_step,
    commit,
    is_series_name,
    linked,
    new_manifest,
    refuse_links,
    series_from_env,
    stage_dir_name,
    step_dir_name,
)
from accel.store.tensorfile import require_tensor_tree, save_tensor_file

__all__ = [
    "MANIFEST",
    "STATE_TENSORS",
    "CheckpointInfo",
    "Checkpoints",
    "check_series",
    "check_step",
    "read_manifest",
    "series_from_env",
]


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


Infos = list[CheckpointInfo]
Unreadables = list[Unreadable]
Paths = list[Path]


class Checkpoints:
    """Save, list and load the checkpoints of a workspace.

    ``series`` defaults to ``ACCEL_RUN_NAME``, else ``launch.run_name`` (``default``).
    Under ``torch.distributed`` with more than one rank, :meth:`save` is a collective.
    """

    def __init__(
        self,
        layout: Layout,
        settings: CheckpointSettings,
        *,
        series: str | None = None,
        run_name: str = "default",
        group: GroupSlot | None = None,
    ) -> None:
        """``group``: another store's :attr:`group`, to share its checkpoint group (see
        :class:`~accel.store.collectives.GroupSlot`: their collectives must never run at
        the same time); a group of its own by default."""
        self.layout = layout
        self.settings = settings
        self.run_name = run_name
        self.root = layout.checkpoints_dir
        self._series = None if series is None else check_series(series)
        self._pool = SnapshotPool()
        self._threads = SaveThreads()
        self.group = group or GroupSlot()  # where its checkpoint context is kept
        self._pending: AsyncSave[CheckpointInfo] | None = None
        self._snapshot: Snapshot | None = None
        self._lease: SeriesLease | None = None
        self._last: CheckpointInfo | None = None
        self._reaper = Reaper(background=True)

    def __repr__(self) -> str:
        return f"Checkpoints({str(self.root)!r})"

    @property
    def series_name(self) -> str:
        return self._series or series_from_env(self.run_name)

    def series_dir(self, series: str | None = None) -> Path:
        return self.root / check_series(series or self.series_name)

    # -- reading (never needs the lease) ------------------------------------------------

    def series(self) -> list[str]:
        """Names of the series folders present."""
        try:
            names = [p.name for p in self.root.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return []
        return sorted(n for n in names if is_series_name(n))

    def view(self, series: str | None = None) -> series_mod.SeriesView:
        """Everything in the series folder, sorted out (see :mod:`accel.store.series`)."""
        await_commit()  # a restarted worker: the failure's checkpoint, being committed
        return series_mod.view(self.series_dir(series))

    def list(self, series: str | None = None) -> Infos:
        """Committed checkpoints of ``series`` (default: this one), sorted by step."""
        return [info_of(found) for found in self.view(series).checkpoints]

    def all(self) -> Infos:
        """Committed checkpoints of every series, by series then step."""
        return [info for name in self.series() for info in self.list(name)]

    def latest(self, series: str | None = None) -> CheckpointInfo | None:
        infos = self.list(series)
        return infos[-1] if infos else None

    def get(self, step: int, series: str | None = None) -> CheckpointInfo | None:
        found = self._find(check_step(step), series)
        return None if found is None else info_of(found)

    def _find(self, step: int, series: str | None) -> Found | None:
        step_dir = self.series_dir(series) / step_dir_name(step)
        await_commit()
        if linked(step_dir.parent, step_dir):  # the view lists it as not accel's
            return None
        try:
            return Found(step_dir, read_manifest(step_dir))
        except IntegrityError:
            # Not committed under its name: an interrupted re-save may hold it, or the
            # folder is unreadable (the view says which).
            return self.view(series).step(step)

    def debris(self, series: str | None = None) -> Paths:
        """accel's leftovers: interrupted saves and deletions, superseded copies.

        A live save's temp folder is listed too: check the series lease
        (:func:`accel.store.lease.holder_of`) before removing anything.
        """
        names = [series] if series else self.series()
        return sorted(p for name in names for p in self.view(name).debris)

    def unreadable(self, series: str | None = None) -> Unreadables:
        """``step-*`` folders whose manifest is refused, with the reason: never loaded,
        never deleted by accel (a newer accel's checkpoint, or a damaged one)."""
        names = [series] if series else self.series()
        return [u for name in names for u in self.view(name).unreadable]

    def load(
        self, step: int | None = None, map_location: Any = "cpu", *, series: str | None = None
    ) -> Any:
        """The state saved at ``step`` (None: the latest), verified against its checksums."""
        found = self._resolve(step, series)
        if STATE_TENSORS not in found.manifest.files:
            raise IntegrityError(f"{found.path} has no {STATE_TENSORS}; it is damaged, delete it")
        return load_file(found, STATE_TENSORS, map_location)

    def load_rank_state(
        self, step: int, rank: int, map_location: Any = "cpu", *, series: str | None = None
    ) -> Any:
        """The per-rank state of ``rank`` saved at ``step``, None when it has none."""
        found = self._resolve(step, series)
        name = rank_name(rank, TENSORS_SUFFIX)
        return None if name not in found.manifest.files else load_file(found, name, map_location)

    def load_sharded(
        self, target: dict[str, Any], step: int | None = None, *, series: str | None = None
    ) -> int:
        """Load the sharded state of ``step`` (None: latest) into ``target`` in place.

        A collective under torch.distributed: every rank calls it. The ranks share the
        verification of every file before any is read. Returns the step loaded.
        """
        self._arrive("Checkpoints.load_sharded")()
        ctx = self._dist_context()
        wanted = attempt(ctx, lambda: self._resolve(step, series).manifest.step)
        chosen = collect(ctx.broadcast(wanted))
        # A rank that cannot find the main rank's step (a node whose disk does not hold
        # it) fails every rank with its line, instead of leaving them in the next gather.
        found: Found = on_every_rank(ctx, lambda: self._resolve(chosen, series))
        files = found.manifest.files
        problems = ctx.all_gather(sharded_mod.verify_share(found.path, files, ctx))
        problem = next((p for p in problems if p), None)
        if problem:
            raise IntegrityError(f"{problem}: load another checkpoint or delete this one")
        if not any(name.startswith(f"{sharded_mod.FOLDER}/") for name in files):
            raise UsageError(f"{found.path} holds no sharded state")
        folder = found.path / sharded_mod.FOLDER
        # Every rank reads and checks the metadata; one rank's refusal is every rank's.
        metadata = on_every_rank(ctx, lambda: sharded_mod.read_metadata(folder, files))
        sharded_mod.load(target, folder, metadata, files, ctx)
        return found.manifest.step

    def _resolve(self, step: int | None, series: str | None) -> Found:
        self._join_pending()
        refuse_links(self.series_dir(series))  # a linked checkpoints/ is read (another disk)
        if step is None:
            checkpoints = self.view(series).checkpoints
            found = checkpoints[-1] if checkpoints else None
        else:
            found = self._find(check_step(step), series)
        if found is None:
            self._refuse_unreadable(step, series)
            which = "no committed checkpoint" if step is None else f"no checkpoint at step {step}"
            raise UsageError(
                f"{which} in series {series or self.series_name!r} "
                f"({self.series_dir(series)}); see `accel status` for what exists"
            )
        return found

    def _refuse_unreadable(self, step: int | None, series: str | None) -> None:
        """A damaged checkpoint at the step asked for is an integrity problem, not a miss."""
        if step is None:
            return
        name = step_dir_name(step)
        for bad in self.view(series).unreadable:
            if bad.path.name == name:
                raise IntegrityError(f"{bad.reason}; load another checkpoint or delete this one")

    # -- saving -------------------------------------------------------------------------

    def save(
        self,
        state: Any,
        step: int,
        *,
        tag: str | None = None,
        async_save: bool | None = None,
        rank_state: Any = None,
        sharded: dict[str, Any] | None = None,
        copy_now: Callable[[Any], bool] | None = None,
    ) -> CheckpointInfo | None:
        """Commit ``state`` as checkpoint ``step``; the info, or None for an async save.

        ``rank_state`` is saved per rank (``rank-<N>.tensors``); ``state`` once, by rank 0;
        ``sharded`` (a state dict of DTensors / FSDP sharded state) through
        ``torch.distributed.checkpoint`` into ``sharded/`` (sync saves only).

        An async save returns before its tensors are copied: the copy runs beside the
        caller, and the tensors must not change until :meth:`fence` returns. Every
        optimizer's ``step()``, this store's next ``save``, ``load`` and ``wait`` fence
        first. The tensors for which ``copy_now`` is true (all, when None: as before a
        fence could be trusted) are copied before ``save`` returns.
        """
        check_step(step)
        if tag is not None and not isinstance(tag, str):
            raise UsageError(f"invalid checkpoint tag {tag!r}: use a string")
        require_tensor_tree(state, "checkpoint state")
        require_tensor_tree(rank_state, "checkpoint rank_state")
        if async_save is None:
            async_save = self.settings.async_save and sharded is None
        if async_save and sharded is not None:
            raise UsageError("sharded state is saved synchronously: pass async_save=False")
        with phase("wait-previous"):
            self.wait()
        met = self._arrive("Checkpoints.save")
        if not async_save or self.group.ctx is None:
            met()  # the first save makes the save's process group: a collective of its own
        ctx = self._dist_context()
        if not async_save:
            self._last = self._write(state, rank_state, step, tag, ctx, sharded)
            return self._last
        later = None if copy_now is None else (lambda tensor: not copy_now(tensor))
        # Only rank 0 writes ``state``: the other ranks copy their rank_state alone.
        mine = state if ctx.rank == 0 else None
        with phase("snapshot"):
            snapshot = self._snapshot = self._pool.take((mine, rank_state), later)

        def copy() -> None:
            with phase("snapshot-copy"):
                snapshot.copy()  # at full speed: the next optimizer step may be waiting

        def persist() -> CheckpointInfo:
            met()  # every rank came (off the caller's path: its error is this save's)
            tree = snapshot.tree  # written niced: it has until the next save to finish
            whole = lambda: _whole(snapshot, step)  # noqa: E731 - every rank checks its own
            return self._write(tree[0], tree[1], step, tag, ctx, check=whole)

        self._pending = AsyncSave(persist, copy=copy, threads=self._threads).start()
        return None

    def commit_files(
        self,
        step: int,
        series: str,
        files: dict[str, tuple[BinaryIO, int]],
        world_size: int,
        tag: str,
        run_id: str | None = None,
    ) -> CheckpointInfo:
        """Commit files written elsewhere (the memory tier's snapshot of ``step``, open,
        each with the size its writer recorded) as checkpoint ``step`` of ``series``:
        copied in and hashed, then the same manifest, commit and retention as :meth:`save`."""
        check_step(step)
        series = check_series(series)
        tmp = self._prepare(series, step, run_id)
        try:
            copied = {}
            for name, (source, size) in files.items():
                with phase("persist-copy"):
                    copied[name] = copy_checked(source, tmp / name, size)
                _faults.point("persist.copied")
            # The launcher commits alone: the manifest names the world that wrote the files.
            done = self._commit(tmp, series, step, tag, copied, DistContext(0, world_size), run_id)
        finally:
            # its marker last: a kill half-way leaves debris clean knows (no-op once renamed)
            dispose(tmp)
        self._reaper.join()
        return info_from_json(done)

    def fence(self) -> None:
        """Wait until the async save in flight has its copy of the state (not its write):
        from then on the state may change."""
        if self._snapshot is not None:
            self._snapshot.fence()

    def _arrive(self, name: str) -> Callable[[], None]:
        """Every rank must reach a checkpoint collective; the call returned waits for them,
        bounded, and says who did not come (:func:`accel.store.collectives.arrive_later`)."""
        return arrive_later(name, self.settings.arrival_timeout)

    def _dist_context(self) -> DistContext:
        """This store's checkpoint group and rank, kept in its group slot; the first call
        makes the group, a collective every rank must make (bounded by
        ``checkpoints.collective_timeout``)."""
        ctx = self.group.ctx = current_context(self.group.ctx, self.settings.collective_timeout)
        return ctx

    def wait(self) -> CheckpointInfo | None:
        """Join background work; raise a failed save's error. The last saved info."""
        self.fence()  # the copy first: its write may need every rank's
        pending, self._pending, self._snapshot = self._pending, None, None
        try:
            if pending is not None:
                self._last = pending.join()
        finally:
            self._reaper.join()
        return self._last

    def _join_pending(self) -> None:
        if self._pending is not None:
            self.wait()

    def _write(
        self,
        state: Any,
        rank_state: Any,
        step: int,
        tag: str | None,
        ctx: DistContext,
        sharded: Any = None,
        check: Callable[[], None] | None = None,
    ) -> CheckpointInfo:
        series = self.series_name
        prepared = None
        if ctx.rank == 0:
            with phase("prepare"):
                prepared = attempt(ctx, lambda: str(self._prepare(series, step)))
        tmp = Path(collect(ctx.broadcast(prepared)))
        try:
            written = attempt(ctx, lambda: _checked(check, tmp, state, rank_state, ctx, sharded))
            files: dict[str, Any] = {}
            for part in ctx.all_gather(written):
                files.update(collect(part, WriteFailed))
            outcome = None
            if ctx.rank == 0:
                outcome = attempt(ctx, lambda: self._commit(tmp, series, step, tag, files, ctx))
            return info_from_json(collect(ctx.broadcast(outcome)))
        finally:
            if ctx.rank == 0:
                # its marker last: a kill half-way leaves debris clean knows (no-op once renamed)
                dispose(tmp)

    def _prepare(self, series_name: str, step: int, run_id: str | None = None) -> Path:
        """Rank 0: take the lease, finish an interrupted re-save, make the temp folder."""
        ensure(self.layout)
        run_id = run_id or os.environ.get("ACCEL_RUN_ID")
        self._lease = ensure_lease(self.layout, series_name, run_id) or self._lease
        folder = self.series_dir(series_name)
        tmp = folder / stage_dir_name(step)
        try:
            refuse_links(self.root, folder)
            series_mod.recover(folder, self._reaper)
            make_owned_dir(tmp, parents=True)
        except OSError as exc:
            raise write_failed(tmp, exc) from exc
        return tmp

    def _commit(
        self,
        tmp: Path,
        series_name: str,
        step: int,
        tag: str | None,
        files: dict[str, Any],
        ctx: DistContext,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Rank 0: manifest last, rename into place (or swap), then retention."""
        manifest = new_manifest(series_name, step, tag, files, ctx.world_size, run_id)
        target = commit(tmp, manifest, self._reaper)
        with phase("retention"):
            self._apply_retention(series_name, keep_step=step)
        return {"path": str(target), "manifest": manifest.to_json()}

    def _apply_retention(self, series_name: str, keep_step: int) -> None:
        keep = self.settings.keep_last
        if keep is not None:  # held back by a reader: owed, paid later (store/lease.py)
            apply_retention(self.layout, series_name, int(keep), keep_step, self._reaper)

    # -- deleting -----------------------------------------------------------------------

    def delete(self, step: int, series: str | None = None) -> bool:
        """Delete checkpoint ``step``; False when there is none (or it is a link, which
        is not accel's: it is left alone)."""
        view = self.view(series)
        found = view.step(check_step(step))
        if found is None:
            return False
        # A re-save a kill interrupted holds two copies of the step: both go, or the
        # old one would become visible again.
        leftovers = [p for swap in view.swaps if swap.step == step for p in swap.leftovers]
        gone = all([series_mod.retire(path) for path in leftovers])
        kept = series_mod.retire_checkpoint(found)
        if kept:
            series_mod.warn_kept(self.layout, found.path, kept, "checkpoints.delete")
        return gone and kept is not None


def _whole(snapshot: Snapshot, step: int) -> None:
    """Refuse a snapshot whose source changed before it was copied: it is torn."""
    if snapshot.torn:
        shown = ", ".join(snapshot.torn[:3]) + (" ..." if len(snapshot.torn) > 3 else "")
        raise UsageError(
            f"checkpoint {step} was not saved: {shown} changed while its snapshot was being "
            "copied; change what an optimizer owns only in its step(), or after "
            "Accelerator.wait_for_snapshot() (Checkpoints.fence())"
        )


def _checked(check: Callable[[], None] | None, *args: Any) -> dict[str, Any]:
    if check is not None:
        check()
    return write_files(*args)


def write_files(
    tmp: Path, state: Any, rank_state: Any, ctx: DistContext, sharded: Any
) -> dict[str, Any]:
    """This rank's files of the checkpoint, written into ``tmp``: ``{name: digest}``."""
    files = {}
    if sharded is not None:  # first: a collective that every rank must reach
        files.update(sharded_mod.save(sharded, tmp / sharded_mod.FOLDER, ctx))
    if ctx.rank == 0:
        files[STATE_TENSORS] = save_tensor_file(state, tmp / STATE_TENSORS).to_json()
    if rank_state is not None:
        name = rank_name(ctx.rank, TENSORS_SUFFIX)
        files[name] = save_tensor_file(rank_state, tmp / name).to_json()
    return files


def copy_checked(source: BinaryIO, target: Path, size: int) -> dict[str, Any]:
    """Copy the open ``source`` to a new ``target`` (fsynced, around the page cache:
    :func:`accel._fs.copy_direct`), hashing it as it goes; its size must be the one its
    writer recorded. The digest, for the manifest."""
    from accel._fs import copy_direct
    from accel.store.hashing import ALGORITHM, new_hasher

    hasher = new_hasher()
    copied = copy_direct(source, target, hasher.update)
    if copied != size:
        raise OSError(errno.EIO, f"{target.name}: {copied} bytes in memory, {size} recorded")
    return {"size": copied, "checksum": f"{ALGORITHM}:{hasher.hexdigest()}"}
