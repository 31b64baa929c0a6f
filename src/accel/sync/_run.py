"""Push and pull: plan, then move unit by unit, recording progress in the remote index.

Push commits each unit (a checkpoint, a run, a file) by writing the index after its
files, so an interrupted push resumes where it stopped. Pull stages a checkpoint or a
cache entry in a ``.tmp-*`` folder beside its place, verifies every file against the
index and the checkpoint against its own manifest, and renames it into place whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from accel.errors import AccelError, IntegrityError, UsageError
from accel.fsutil import TMP_PREFIX, fsync_dir
from accel.locking import locked
from accel.sync._checksum import hash_file
from accel.sync._inventory import MANIFEST, inventory, manifest_entry, redacted_copy
from accel.sync._model import (
    CACHE,
    CHECKPOINT,
    FileEntry,
    LocalFile,
    NullReporter,
    Reporter,
    Skipped,
    SyncPlan,
    SyncResult,
    Transfer,
)
from accel.sync._paths import kind_of, local_path, unit_of
from accel.sync._plan import LocalView, needs_checksum, plan_pull, plan_push
from accel.sync._remote import INDEX_NAME, Remote, backend_error

if TYPE_CHECKING:
    from accel.workspace import Workspace

_T = TypeVar("_T")
INDEX_EVERY = 2.0  # seconds between index writes while small units stream by
_BACKEND_ERRORS = (OSError, RuntimeError, ValueError)


def push(
    ws: Workspace,
    remote: Remote,
    *,
    include_cache: bool = False,
    dry_run: bool = False,
    verify: bool = False,
    reporter: Reporter | None = None,
) -> SyncResult:
    """Copy what changed to ``remote``; the result says what moved and what failed.

    ``verify`` re-reads checkpoint files and checks them against their manifest first
    (a pull always verifies; this catches local damage before it is sent).
    """
    if not ws.exists:
        raise UsageError(f"no workspace at {ws.path}; nothing to push")
    ws.check_layout()
    with locked(ws.lock_path("sync"), ws), tempfile.TemporaryDirectory(prefix="accel-") as tmp:
        index = _guard(remote, remote.read_index) or {}
        files, skipped = inventory(ws, include_cache)
        files = [redacted_copy(f, Path(tmp)) for f in files]
        plan = plan_push(_with_checksums(files, index), index, skipped)
        if dry_run:
            return SyncResult(plan, remote.url, True)
        return _execute(plan, remote, reporter or NullReporter(), _PushUnit(remote, verify))


def pull(
    ws: Workspace,
    remote: Remote,
    *,
    include_cache: bool = False,
    dry_run: bool = False,
    reporter: Reporter | None = None,
) -> SyncResult:
    """Copy what this workspace lacks from ``remote``, verified before it is visible."""
    index = _guard(remote, remote.read_index)
    if index is None:
        raise UsageError(f"nothing was pushed to {remote.url} (no {INDEX_NAME} there)")
    paths = {rel: str(local_path(ws, rel)) for rel in index}  # refuses unsafe paths
    view = _local_view(ws, index) if ws.exists else LocalView({})
    plan = plan_pull(index, view, include_cache, paths)
    if dry_run:
        return SyncResult(plan, remote.url, True)
    ws.ensure()
    with locked(ws.lock_path("sync"), ws):
        return _execute(plan, remote, reporter or NullReporter(), _PullUnit(ws, remote, index))


def _guard(remote: Remote, fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except AccelError:
        raise
    except _BACKEND_ERRORS as exc:
        raise backend_error(remote.url, exc) from None


def _with_checksums(files: list[LocalFile], index: dict[str, FileEntry]) -> list[LocalFile]:
    wanted = set(needs_checksum(files, index))
    out = []
    for f in files:
        if f.rel in wanted:
            with contextlib.suppress(OSError):
                checksum, size = hash_file(f.path)
                f = LocalFile(f.rel, f.path, size, checksum, f.unit, f.kind)
        out.append(f)
    return out


class _Mover(Protocol):
    def __call__(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None: ...

    def flush(self) -> None: ...


class _PushUnit:
    def __init__(self, remote: Remote, verify: bool) -> None:
        self.remote, self.verify = remote, verify
        self.done: dict[str, FileEntry] = {}
        self._last_write = time.monotonic()

    def __call__(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        self.remote.remove_debris(unit)
        moved = {}
        for t in transfers:
            moved[t.rel] = self.remote.upload(
                t.local, t.rel, t.checksum, reporter.advance, verify=self.verify
            )
        self.done.update(moved)
        if transfers[0].kind == CHECKPOINT or time.monotonic() - self._last_write > INDEX_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.done:
            self.remote.write_index(self.done)
        self._last_write = time.monotonic()


class _PullUnit:
    def __init__(self, ws: Workspace, remote: Remote, index: dict[str, FileEntry]) -> None:
        self.ws, self.remote, self.index = ws, remote, index

    def __call__(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        kind = transfers[0].kind
        if kind == CHECKPOINT or (kind == CACHE and unit.endswith(".entry")):
            self._staged(unit, transfers, reporter)
        else:
            for t in transfers:
                self._one_file(t, reporter)

    def flush(self) -> None:
        pass

    def _one_file(self, t: Transfer, reporter: Reporter) -> None:
        target = local_path(self.ws, t.rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f"{TMP_PREFIX}{uuid.uuid4().hex[:12]}"
        try:
            self.remote.download(t.rel, tmp, self.index[t.rel], reporter.advance)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        fsync_dir(target.parent)

    def _staged(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        final = local_path(self.ws, transfers[0].rel)
        while final.name != unit.rsplit("/", 1)[-1]:
            final = final.parent
        final.parent.mkdir(parents=True, exist_ok=True)
        stage = final.parent / f".tmp-sync-{uuid.uuid4().hex[:12]}"
        try:
            for t in transfers:  # commit markers come last in plan order
                dest = stage / t.rel[len(unit) + 1 :]
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.remote.download(t.rel, dest, self.index[t.rel], reporter.advance)
            if transfers[0].kind == CHECKPOINT:
                _verify_checkpoint(stage, unit, self.index)
            fsync_dir(stage)
            self._commit(stage, final, transfers[0].kind)
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _commit(self, stage: Path, final: Path, kind: str) -> None:
        lock = self.ws.lock_path("cache") if kind == CACHE else self.ws.lock_path("sync-commit")
        with locked(lock, self.ws):
            if final.exists():
                raise UsageError(f"{final} appeared while it was pulled; kept the local one")
            os.rename(stage, final)
        fsync_dir(final.parent)


def _verify_checkpoint(stage: Path, unit: str, index: dict[str, FileEntry]) -> None:
    """The manifest must be valid for its step and list exactly the files pulled."""
    manifest = _staged_manifest(stage, unit.rsplit("/", 1)[-1])
    pulled = {rel[len(unit) + 1 :] for rel in index if rel.startswith(unit + "/")}
    if manifest is None or pulled != set(manifest["files"]) | {MANIFEST}:
        raise IntegrityError(f"{unit}: its manifest does not match the files pulled; refused")
    for name, raw in manifest["files"].items():
        if manifest_entry(raw) != index[f"{unit}/{name}"]:
            raise IntegrityError(f"{unit}/{name} does not match its manifest; refused")


def _staged_manifest(stage: Path, name: str) -> dict[str, Any] | None:
    """The staged manifest, validated as if it were already in its folder ``name``."""
    from accel.store.checkpoints import read_manifest

    return read_manifest(stage, name)


def _local_view(ws: Workspace, index: dict[str, FileEntry]) -> LocalView:
    from accel.runs import live_run_ids

    files: dict[str, FileEntry] = {}
    units: set[str] = set()
    for unit in {unit_of(rel) for rel in index if kind_of(rel) == CHECKPOINT}:
        units.update(_checkpoint_here(ws, unit, files))
    for rel, entry in index.items():
        if kind_of(rel) == CHECKPOINT:
            continue
        unit = unit_of(rel)
        if unit.endswith(".entry") and local_path(ws, unit + "/meta.json").parent.is_dir():
            units.add(unit)
        mine = _file_here(local_path(ws, rel), entry)
        if mine is not None:
            files[rel] = mine
    return LocalView(files, frozenset(units), frozenset(live_run_ids(ws)))


def _checkpoint_here(ws: Workspace, unit: str, files: dict[str, FileEntry]) -> Iterable[str]:
    from accel.sync._inventory import checkpoint_files

    step_dir = ws.checkpoints_dir.joinpath(*unit.split("/")[1:])
    if not step_dir.exists():
        return ()
    for item in checkpoint_files(step_dir, unit):
        if isinstance(item, LocalFile) and item.checksum:
            files[item.rel] = FileEntry(item.size, item.checksum)
    return (unit,)


def _file_here(path: Path, remote: FileEntry) -> FileEntry | None:
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size != remote.size:
        return FileEntry(size, "")
    try:
        checksum, size = hash_file(path)
    except OSError:
        return None
    return FileEntry(size, checksum)


def _execute(plan: SyncPlan, remote: Remote, reporter: Reporter, move: _Mover) -> SyncResult:
    """Move unit by unit; a unit that fails is reported and the others still move."""
    started = time.monotonic()
    failed: list[Skipped] = []
    files = moved_bytes = 0
    reporter.begin(plan.total_bytes, len(plan.transfers))
    try:
        for unit, transfers in plan.units():
            try:
                move(unit, transfers, reporter)
            except (AccelError, FileNotFoundError) as exc:
                failed.append(Skipped(unit, _reason(exc)))
                continue
            except _BACKEND_ERRORS as exc:
                raise backend_error(remote.url, exc) from None
            files += len(transfers)
            moved_bytes += sum(t.size for t in transfers)
    except BaseException:
        with contextlib.suppress(Exception):  # keep what finished; the first error wins
            move.flush()
        raise
    finally:
        reporter.end()
    _guard(remote, move.flush)
    elapsed = time.monotonic() - started
    return SyncResult(plan, remote.url, False, files, moved_bytes, elapsed, tuple(failed))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "a file vanished while it was synced"
    return str(exc)
