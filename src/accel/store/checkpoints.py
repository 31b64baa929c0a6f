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
folder is fsynced. Re-saving an existing step swaps the folders so that one whole copy
of the step is visible at every instant (:mod:`accel.store.series`). A kill at any
instant leaves the previous checkpoints whole and the new one committed or invisible.

Deleting (retention, ``delete``, ``accel clean``) renames the folder to ``.del-*`` and
fsyncs that before a single file goes, the manifest last. Loading verifies sizes and
checksums and unpickles nothing (see ``accel.store._tensorfile``). A folder whose
manifest is damaged is no checkpoint: listing skips it, loading it raises
:class:`~accel.errors.IntegrityError`, and the rest of the series is unaffected.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import AccelError, IntegrityError, UsageError, WorkspaceError
from accel.fsutil import fsync_dir, remove_tree
from accel.layout import MANIFEST, make_owned_dir
from accel.layout import SERIES_RE as _SERIES_RE
from accel.store import _sharded
from accel.store import series as series_mod
from accel.store._dist import DistContext, current_context
from accel.store._serial import (
    FileDigest,
    WriteFailed,
    load_tensor_file,
    save_tensor_file,
    write_error,
)
from accel.store._snapshot import SnapshotPool
from accel.store._trace import phase
from accel.store._values import require_tensor_tree
from accel.store.lease import LeaseHeld, SeriesLease, ensure_lease
from accel.store.manifest import (
    MAX_STEP,
    Manifest,
    parse_manifest,
    read_manifest,
    write_manifest,
)
from accel.store.series import Found, Reaper, Unreadable, step_dir_name

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["MANIFEST", "CheckpointInfo", "Checkpoints", "read_manifest", "series_from_env"]

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


Infos = list[CheckpointInfo]
Unreadables = list[Unreadable]
Paths = list[Path]


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


def series_from_env(ws: Workspace, env: dict[str, str] | None = None) -> str:
    """``ACCEL_RUN_NAME`` when set, else ``launch.run_name`` from the config."""
    env = dict(os.environ) if env is None else env
    return check_series(env.get("ACCEL_RUN_NAME") or ws.config["launch.run_name"])


def _info(found: Found) -> CheckpointInfo:
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


class Checkpoints:
    """Save, list and load the checkpoints of a workspace.

    ``series`` defaults to ``ACCEL_RUN_NAME``, else ``launch.run_name`` (``default``).
    Under ``torch.distributed`` with more than one rank, :meth:`save` is a collective.
    """

    def __init__(self, ws: Workspace, series: str | None = None) -> None:
        self.ws = ws
        self._series = None if series is None else check_series(series)
        self._pool = SnapshotPool()
        self._dist: DistContext | None = None
        self._pending: _AsyncSave | None = None
        self._lease: SeriesLease | None = None
        self._last: CheckpointInfo | None = None
        self._reaper = Reaper(background=True)

    def __repr__(self) -> str:
        return f"Checkpoints({str(self.ws.checkpoints_dir)!r})"

    @property
    def series_name(self) -> str:
        return self._series or series_from_env(self.ws)

    def series_dir(self, series: str | None = None) -> Path:
        return self.ws.checkpoints_dir / check_series(series or self.series_name)

    # -- reading (never needs the lease) ------------------------------------------------

    def series(self) -> list[str]:
        """Names of the series folders present."""
        try:
            names = [p.name for p in self.ws.checkpoints_dir.iterdir() if p.is_dir()]
        except OSError:
            return []
        return sorted(n for n in names if _SERIES_RE.fullmatch(n))

    def view(self, series: str | None = None) -> series_mod.SeriesView:
        """Everything in the series folder, sorted out (see :mod:`accel.store.series`)."""
        return series_mod.view(self.series_dir(series))

    def list(self, series: str | None = None) -> Infos:
        """Committed checkpoints of ``series`` (default: this one), sorted by step."""
        return [_info(found) for found in self.view(series).checkpoints]

    def all(self) -> Infos:
        """Committed checkpoints of every series, by series then step."""
        return [info for name in self.series() for info in self.list(name)]

    def latest(self, series: str | None = None) -> CheckpointInfo | None:
        infos = self.list(series)
        return infos[-1] if infos else None

    def get(self, step: int, series: str | None = None) -> CheckpointInfo | None:
        found = self._find(check_step(step), series)
        return None if found is None else _info(found)

    def _find(self, step: int, series: str | None) -> Found | None:
        step_dir = self.series_dir(series) / step_dir_name(step)
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
        digest = found.manifest.files.get(STATE_FILE)
        if digest is None:
            raise IntegrityError(f"{found.path} has no {STATE_FILE}; it is damaged, delete it")
        return load_tensor_file(found.path / STATE_FILE, digest, map_location)

    def load_rank_state(
        self, step: int, rank: int, map_location: Any = "cpu", *, series: str | None = None
    ) -> Any:
        """The per-rank state of ``rank`` saved at ``step``, None when it has none."""
        found = self._resolve(step, series)
        name = f"rank-{rank}.tensors"
        digest = found.manifest.files.get(name)
        return None if digest is None else load_tensor_file(found.path / name, digest, map_location)

    def load_sharded(
        self, target: dict[str, Any], step: int | None = None, *, series: str | None = None
    ) -> int:
        """Load the sharded state of ``step`` (None: latest) into ``target`` in place.

        A collective under torch.distributed: every rank calls it. The ranks share the
        verification of every file before any is read. Returns the step loaded.
        """
        self._arrive("Checkpoints.load_sharded")
        ctx = self._dist = current_context(self._dist, self._collective_timeout())
        wanted = _attempt(ctx, lambda: self._resolve(step, series).manifest.step)
        found = self._resolve(_collect(ctx.broadcast(wanted)), series)
        files = found.manifest.files
        problems = ctx.all_gather(_sharded.verify_share(found.path, files, ctx))
        problem = next((p for p in problems if p), None)
        if problem:
            raise IntegrityError(f"{problem}: load another checkpoint or delete this one")
        if not any(name.startswith(f"{_sharded.FOLDER}/") for name in files):
            raise UsageError(f"{found.path} holds no sharded state")
        _sharded.load(target, found.path / _sharded.FOLDER, ctx)
        return found.manifest.step

    def _resolve(self, step: int | None, series: str | None) -> Found:
        self._join_pending()
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
    ) -> CheckpointInfo | None:
        """Commit ``state`` as checkpoint ``step``; the info, or None for an async save.

        ``rank_state`` is saved per rank (``rank-<N>.tensors``); ``state`` once, by rank 0;
        ``sharded`` (a state dict of DTensors / FSDP sharded state) through
        ``torch.distributed.checkpoint`` into ``sharded/`` (sync saves only).
        """
        check_step(step)
        if tag is not None and not isinstance(tag, str):
            raise UsageError(f"invalid checkpoint tag {tag!r}: use a string")
        require_tensor_tree(state, "checkpoint state")
        require_tensor_tree(rank_state, "checkpoint rank_state")
        with phase("wait-previous"):
            self.wait()
        self._arrive("Checkpoints.save")
        self._dist = current_context(self._dist, self._collective_timeout())
        if async_save is None:
            async_save = bool(self.ws.config["checkpoints.async_save"]) and sharded is None
        if async_save and sharded is not None:
            raise UsageError("sharded state is saved synchronously: pass async_save=False")
        if not async_save:
            self._last = self._write(state, rank_state, step, tag, self._dist, sharded)
            return self._last
        with phase("snapshot"):
            snapshot = self._pool.snapshot((state, rank_state))
        self._pending = _AsyncSave(self, snapshot, step, tag, self._dist).start()
        return None

    def _arrive(self, name: str) -> None:
        """Every rank must reach a checkpoint collective; a bounded wait says who did not."""
        from accel.store._arrival import arrive

        arrive(name, float(self.ws.config["checkpoints.arrival_timeout"]))

    def _collective_timeout(self) -> float:
        return float(self.ws.config["checkpoints.collective_timeout"])

    def wait(self) -> CheckpointInfo | None:
        """Join background work; raise a failed save's error. The last saved info."""
        pending, self._pending = self._pending, None
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
    ) -> CheckpointInfo:
        series = self.series_name
        prepared = None
        if ctx.rank == 0:
            with phase("prepare"):
                prepared = _attempt(ctx, lambda: str(self._prepare(series, step)))
        tmp = Path(_collect(ctx.broadcast(prepared)))
        try:
            written = _attempt(ctx, lambda: self._write_files(tmp, state, rank_state, ctx, sharded))
            files: dict[str, Any] = {}
            for part in ctx.all_gather(written):
                files.update(_collect(part, WriteFailed))
            outcome = None
            if ctx.rank == 0:
                outcome = _attempt(ctx, lambda: self._commit(tmp, series, step, tag, files, ctx))
            return _info_from_json(_collect(ctx.broadcast(outcome)))
        finally:
            if ctx.rank == 0:
                remove_tree(tmp)  # a no-op once committed: the folder was renamed

    def _prepare(self, series_name: str, step: int) -> Path:
        """Rank 0: take the lease, finish an interrupted re-save, make the temp folder."""
        self.ws.ensure()
        run_id = os.environ.get("ACCEL_RUN_ID")
        self._lease = ensure_lease(self.ws, series_name, run_id) or self._lease
        folder = self.series_dir(series_name)
        tmp = folder / f".tmp-{step:012d}-{secrets.token_hex(6)}"
        try:
            _refuse_links(self.ws.checkpoints_dir, folder)
            series_mod.recover(folder, self._reaper)
            make_owned_dir(tmp, parents=True)
        except OSError as exc:
            raise write_error(tmp, exc) from exc
        return tmp

    def _write_files(
        self, tmp: Path, state: Any, rank_state: Any, ctx: DistContext, sharded: Any
    ) -> dict[str, Any]:
        files = {}
        if sharded is not None:  # first: a collective that every rank must reach
            files.update(_sharded.save(sharded, tmp / _sharded.FOLDER, ctx))
        if ctx.rank == 0:
            files[STATE_FILE] = save_tensor_file(state, tmp / STATE_FILE).to_json()
        if rank_state is not None:
            name = f"rank-{ctx.rank}.tensors"
            files[name] = save_tensor_file(rank_state, tmp / name).to_json()
        return files

    def _commit(
        self,
        tmp: Path,
        series_name: str,
        step: int,
        tag: str | None,
        files: dict[str, Any],
        ctx: DistContext,
    ) -> dict[str, Any]:
        """Rank 0: manifest last, rename into place (or swap), then retention."""
        target = tmp.parent / step_dir_name(step)
        manifest = Manifest(
            series=series_name,
            step=step,
            created=time.time(),
            tag=tag,
            run_id=os.environ.get("ACCEL_RUN_ID"),
            world_size=ctx.world_size,
            files={n: FileDigest(int(f["size"]), str(f["checksum"])) for n, f in files.items()},
        )
        try:
            with phase("manifest"):
                write_manifest(tmp, manifest)
            with phase("fsync-dir"):
                fsync_dir(tmp)
            with phase("rename"):
                if os.path.lexists(target):
                    series_mod.swap_in(tmp, target, self._reaper)
                else:
                    os.rename(tmp, target)
                    fsync_dir(tmp.parent)
        except OSError as exc:
            raise write_error(target, exc) from exc
        with phase("retention"):
            self._apply_retention(series_name, keep_step=step)
        return {"path": str(target), "manifest": manifest.to_json()}

    def _apply_retention(self, series_name: str, keep_step: int) -> None:
        keep = self.ws.config["checkpoints.keep_last"]
        if keep is None:
            return
        infos = self.list(series_name)
        survivors = {i.step for i in infos[-int(keep) :]} | {keep_step}
        for info in infos:
            if info.step not in survivors:
                self._reaper.retire(info.path)

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
        return all([series_mod.retire(path) for path in (found.path, *leftovers)])


class _AsyncSave:
    """One background save; its error is kept for :meth:`Checkpoints.wait`."""

    def __init__(
        self, owner: Checkpoints, snapshot: Any, step: int, tag: str | None, ctx: DistContext
    ) -> None:
        self._run: Callable[[], CheckpointInfo] = lambda: owner._write(
            snapshot[0], snapshot[1], step, tag, ctx
        )
        self._result: CheckpointInfo | None = None
        self._error: BaseException | None = None
        # Not a daemon: the interpreter waits for the last checkpoint before exiting.
        self._thread = threading.Thread(target=self._main, name=f"accel-save-{step}")

    def _main(self) -> None:
        try:
            self._result = self._run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self._error = exc

    def start(self) -> _AsyncSave:
        self._thread.start()
        return self

    def join(self) -> CheckpointInfo:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def _attempt(ctx: DistContext, fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """(result, None) or (None, error): a rank's failure travels to every rank.

    A single process raises directly, keeping the original exception.
    """
    if ctx.world_size == 1:
        return fn(), None
    try:
        return fn(), None
    except AccelError as exc:
        return None, f"{type(exc).__name__}:rank {ctx.rank}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the other ranks must not wait forever
        return None, f"AccelError:rank {ctx.rank}: {type(exc).__name__}: {exc}"


def _collect(outcome: tuple[Any, str | None], default: type[AccelError] = AccelError) -> Any:
    value, error = outcome
    if error is None:
        return value
    name, _, message = error.partition(":")
    cls = _ERRORS.get(name, default)
    raise cls(message)


_ERRORS: dict[str, type[AccelError]] = {
    cls.__name__: cls for cls in (AccelError, UsageError, IntegrityError, WriteFailed, LeaseHeld)
}


def _info_from_json(data: dict[str, Any]) -> CheckpointInfo:
    path = Path(data["path"])
    return _info(Found(path, parse_manifest(data["manifest"], str(path / MANIFEST))))


def _refuse_links(root: Path, folder: Path) -> None:
    """accel writes and deletes through real folders only: a link could lead anywhere."""
    for path in (root, folder):
        if os.path.islink(path):
            raise WorkspaceError(
                f"{path} is a symbolic link; accel does not save or delete through links "
                "(move the data with workspace.path instead)"
            )
