"""Checkpoints: training state committed whole or not at all.

::

    checkpoints/<series>/step-<step:012d>/   one committed checkpoint
        state.tensors                       replicated state, written by rank 0
        rank-<N>.tensors                    per-rank state (RNG), when given
        manifest.json                       written last: it makes the folder a checkpoint
    checkpoints/<series>/.tmp-*             a save in progress, or crash debris

Commit protocol: every file is written under ``.tmp-<step>-<id>/``, hashed while it
is written (xxh3-64) and fsynced; then ``manifest.json`` (``format``, ``series``,
``step``, ``created``, ``tag``, ``run_id``, ``world_size``, ``files``: name -> size and
checksum) is written atomically into that folder, the folder is renamed to
``step-<step>`` and the series folder is fsynced. A kill at any instant leaves the
previous checkpoints whole and the new one either committed or invisible.

Deleting (retention, ``delete``, ``accel clean``) removes ``manifest.json`` first, so
a half-deleted checkpoint is never visible. Loading verifies sizes and checksums and
unpickles nothing (see ``accel.store._tensorfile``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.errors import AccelError, IntegrityError, UsageError
from accel.fsutil import fsync_dir, read_json
from accel.store import _sharded
from accel.store._dist import DistContext, current_context
from accel.store._serial import (
    FileDigest,
    WriteFailed,
    load_tensor_file,
    save_tensor_file,
    write_error,
)
from accel.store._snapshot import SnapshotPool
from accel.store._values import require_tensor_tree
from accel.store.lease import LeaseHeld, SeriesLease, ensure_lease

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["CheckpointInfo", "Checkpoints", "series_from_env"]

FORMAT = 1
MANIFEST = "manifest.json"
STATE_FILE = "state.tensors"
TMP_PREFIX = ".tmp-"
MAX_STEP = 10**12 - 1
_STEP_RE = re.compile(r"step-([0-9]{12})")
_SERIES_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


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
Paths = list[Path]


def step_dir_name(step: int) -> str:
    return f"step-{step:012d}"


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


def read_manifest(step_dir: Path, name: str | None = None) -> dict[str, Any] | None:
    """The manifest of a committed checkpoint folder, None when it has no valid one.

    ``name``: the step folder name to validate against when ``step_dir`` is a staging
    folder that will be renamed to it (default: ``step_dir``'s own name).
    """
    match = _STEP_RE.fullmatch(name or step_dir.name)
    try:
        data = read_json(step_dir / MANIFEST)
    except (OSError, ValueError):
        return None
    if not (match and isinstance(data, dict) and data.get("format") == FORMAT):
        return None
    if data.get("step") != int(match.group(1)) or not isinstance(data.get("files"), dict):
        return None
    return data


def _info(step_dir: Path, manifest: dict[str, Any]) -> CheckpointInfo:
    files = manifest["files"]
    return CheckpointInfo(
        series=str(manifest["series"]),
        step=int(manifest["step"]),
        path=step_dir,
        created=float(manifest["created"]),
        size=sum(int(f["size"]) for f in files.values()),
        tag=manifest.get("tag"),
        run_id=manifest.get("run_id"),
        world_size=int(manifest.get("world_size", 1)),
        files=tuple(sorted(files)),
    )


def _digest(manifest: dict[str, Any], name: str) -> FileDigest | None:
    entry = manifest["files"].get(name)
    if entry is None:
        return None
    return FileDigest(int(entry["size"]), str(entry["checksum"]))


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
        self._reapers: list[threading.Thread] = []

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

    def list(self, series: str | None = None) -> Infos:
        """Committed checkpoints of ``series`` (default: this one), sorted by step."""
        folder = self.series_dir(series)
        try:
            candidates = [p for p in folder.iterdir() if _STEP_RE.fullmatch(p.name)]
        except OSError:
            return []
        infos = []
        for step_dir in candidates:
            manifest = read_manifest(step_dir)
            if manifest is not None:
                infos.append(_info(step_dir, manifest))
        return sorted(infos, key=lambda i: i.step)

    def all(self) -> Infos:
        """Committed checkpoints of every series, by series then step."""
        return [info for name in self.series() for info in self.list(name)]

    def latest(self, series: str | None = None) -> CheckpointInfo | None:
        infos = self.list(series)
        return infos[-1] if infos else None

    def get(self, step: int, series: str | None = None) -> CheckpointInfo | None:
        step_dir = self.series_dir(series) / step_dir_name(check_step(step))
        manifest = read_manifest(step_dir)
        return None if manifest is None else _info(step_dir, manifest)

    def debris(self, series: str | None = None) -> Paths:
        """Temp folders and step folders without a valid manifest.

        A live save's temp folder is listed too: check the series lease
        (:func:`accel.store.lease.holder_of`) before removing anything.
        """
        names = [series] if series else self.series()
        out = []
        for name in names:
            try:
                children = list(self.series_dir(name).iterdir())
            except OSError:
                continue
            for child in children:
                if child.name.startswith(TMP_PREFIX) or (
                    _STEP_RE.fullmatch(child.name) and read_manifest(child) is None
                ):
                    out.append(child)
        return sorted(out)

    def load(
        self, step: int | None = None, map_location: Any = "cpu", *, series: str | None = None
    ) -> Any:
        """The state saved at ``step`` (None: the latest), verified against its checksums."""
        info, manifest = self._resolve(step, series)
        digest = _digest(manifest, STATE_FILE)
        if digest is None:
            raise IntegrityError(f"{info.path} has no {STATE_FILE}; it is damaged, delete it")
        return load_tensor_file(info.path / STATE_FILE, digest, map_location)

    def load_rank_state(
        self, step: int, rank: int, map_location: Any = "cpu", *, series: str | None = None
    ) -> Any:
        """The per-rank state of ``rank`` saved at ``step``, None when it has none."""
        info, manifest = self._resolve(step, series)
        name = f"rank-{rank}.tensors"
        digest = _digest(manifest, name)
        return None if digest is None else load_tensor_file(info.path / name, digest, map_location)

    def load_sharded(
        self, target: dict[str, Any], step: int | None = None, *, series: str | None = None
    ) -> int:
        """Load the sharded state of ``step`` (None: latest) into ``target`` in place.

        A collective under torch.distributed: every rank calls it. The ranks share the
        verification of every file before any is read. Returns the step loaded.
        """
        ctx = self._dist = current_context(self._dist)
        found = _collect(ctx.broadcast(_attempt(ctx, lambda: self._resolve(step, series)[0].step)))
        info, manifest = self._resolve(found, series)
        problems = ctx.all_gather(_sharded.verify_share(info.path, manifest["files"], ctx))
        problem = next((p for p in problems if p), None)
        if problem:
            raise IntegrityError(f"{problem}: load another checkpoint or delete this one")
        if not any(name.startswith(f"{_sharded.FOLDER}/") for name in manifest["files"]):
            raise UsageError(f"{info.path} holds no sharded state")
        _sharded.load(target, info.path / _sharded.FOLDER, ctx)
        return info.step

    def _resolve(
        self, step: int | None, series: str | None
    ) -> tuple[CheckpointInfo, dict[str, Any]]:
        self._join_pending()
        info = self.latest(series) if step is None else self.get(step, series)
        if info is None:
            which = "no committed checkpoint" if step is None else f"no checkpoint at step {step}"
            raise UsageError(
                f"{which} in series {series or self.series_name!r} "
                f"({self.series_dir(series)}); see `accel status` for what exists"
            )
        manifest = read_manifest(info.path)
        if manifest is None:  # deleted between listing and reading
            raise IntegrityError(f"{info.path} was deleted while it was being read; retry")
        return info, manifest

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
        self.wait()
        self._dist = current_context(self._dist)
        if async_save is None:
            async_save = bool(self.ws.config["checkpoints.async_save"]) and sharded is None
        if async_save and sharded is not None:
            raise UsageError("sharded state is saved synchronously: pass async_save=False")
        if not async_save:
            self._last = self._write(state, rank_state, step, tag, self._dist, sharded)
            return self._last
        snapshot = self._pool.snapshot((state, rank_state))
        self._pending = _AsyncSave(self, snapshot, step, tag, self._dist).start()
        return None

    def wait(self) -> CheckpointInfo | None:
        """Join background work; raise a failed save's error. The last saved info."""
        pending, self._pending = self._pending, None
        try:
            if pending is not None:
                self._last = pending.join()
        finally:
            self._join_reapers()
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
                _remove_tree(tmp)  # a no-op once committed: the folder was renamed

    def _prepare(self, series: str, step: int) -> Path:
        """Rank 0: take the lease, make the temp folder."""
        self.ws.ensure()
        self._lease = ensure_lease(self.ws, series, os.environ.get("ACCEL_RUN_ID")) or self._lease
        folder = self.series_dir(series)
        tmp = folder / f"{TMP_PREFIX}{step:012d}-{uuid.uuid4().hex[:12]}"
        try:
            tmp.mkdir(parents=True)
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
        series: str,
        step: int,
        tag: str | None,
        files: dict[str, Any],
        ctx: DistContext,
    ) -> dict[str, Any]:
        """Rank 0: manifest last, rename into place, then retention."""
        folder = self.series_dir(series)
        target = folder / step_dir_name(step)
        manifest = {
            "format": FORMAT,
            "series": series,
            "step": step,
            "created": time.time(),
            "tag": tag,
            "run_id": os.environ.get("ACCEL_RUN_ID"),
            "world_size": ctx.world_size,
            "files": files,
        }
        try:
            # The temp folder is invisible: the manifest needs no rename of its own,
            # the folder's rename commits everything at once.
            _write_durably(tmp / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
            fsync_dir(tmp)
            if target.exists():
                self._retire(target)
            os.rename(tmp, target)
            fsync_dir(folder)
        except OSError as exc:
            raise write_error(target, exc) from exc
        self._apply_retention(series, keep_step=step)
        return {"path": str(target), "manifest": manifest}

    def _apply_retention(self, series: str, keep_step: int) -> None:
        keep = self.ws.config["checkpoints.keep_last"]
        if keep is None:
            return
        infos = self.list(series)
        survivors = {i.step for i in infos[-int(keep) :]} | {keep_step}
        for info in infos:
            if info.step not in survivors:
                self._retire(info.path, background=True)

    # -- deleting -----------------------------------------------------------------------

    def delete(self, step: int, series: str | None = None) -> bool:
        """Delete checkpoint ``step`` (manifest first); False when it does not exist."""
        target = self.series_dir(series) / step_dir_name(check_step(step))
        if not target.exists():
            return False
        self._retire(target)
        return True

    def _retire(self, step_dir: Path, *, background: bool = False) -> None:
        """Make ``step_dir`` durably invisible, then remove its data.

        The manifest goes first and the folder is renamed to ``.tmp-del-*`` and that
        rename is fsynced before a single file is removed, so no power loss or kill
        leaves a checkpoint that looks whole but is not. Retention does the fsync and
        the removal in a background thread: they must not stall the training loop.
        """
        with contextlib.suppress(FileNotFoundError):
            (step_dir / MANIFEST).unlink()
        doomed = step_dir.parent / f"{TMP_PREFIX}del-{uuid.uuid4().hex[:12]}"
        try:
            os.rename(step_dir, doomed)
        except OSError:
            doomed = step_dir
        if not background:
            _remove_durably(doomed)
            return
        # Not a daemon: the interpreter finishes the removal before it exits.
        reaper = threading.Thread(target=_remove_durably, args=(doomed,), name="accel-reap")
        reaper.start()
        self._reapers = [t for t in self._reapers if t.is_alive()] + [reaper]

    def _join_reapers(self) -> None:
        while self._reapers:
            self._reapers.pop().join()


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
    return _info(Path(data["path"]), data["manifest"])


def _write_durably(path: Path, text: str) -> None:
    with open(path, "x", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _remove_durably(doomed: Path) -> None:
    """Make the rename to ``doomed`` durable before a single byte of data goes."""
    fsync_dir(doomed.parent)
    _remove_tree(doomed)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
