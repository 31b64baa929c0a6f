"""Push and pull: plan, then move unit by unit, recording progress in the remote index.

Push commits each unit (a checkpoint, a run, a file) by writing the index after its
files, so an interrupted push resumes where it stopped; what it uploads is redacted.
Pull considers only known files in known places (:mod:`accel.sync._trust`), never
writes into a series a live run holds, and moves each unit staged and verified
(:mod:`accel.sync._pull`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from accel._locks import locked, shared
from accel.errors import AccelError, UsageError
from accel.layout import (
    CACHE_DIR,
    CACHE_META,
    CHECKPOINTS_DIR,
    ENTRY_SUFFIX,
    SYNC_LOCK,
    series_readers_lock,
)
from accel.store.hashing import hash_file
from accel.store.lease import catch_up_retention
from accel.sync._inventory import inventory, redacted_copy
from accel.sync._model import (
    CHECKPOINT,
    CONFIG,
    PUSH,
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
from accel.sync._pull import PullUnit, link_in_the_way, link_refusal
from accel.sync._remote import INDEX_NAME, Remote, backend_error, from_backend
from accel.sync._trust import screen

if TYPE_CHECKING:
    from accel.workspace import Workspace

_T = TypeVar("_T")
INDEX_EVERY = 2.0  # seconds between index writes while small units stream by


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
    if remote.read_only:
        protocol = remote.url.split("://", 1)[0]
        raise UsageError(
            f"{remote.url}: {protocol}:// is read-only for accel sync (pull works from it): "
            "push to a writable remote (file://, s3://, gs://, ...)"
        )
    if not ws.exists:
        raise UsageError(f"no workspace at {ws.path}; nothing to push")
    ws.check_layout()
    _refuse_a_workspace(ws, remote)
    # A dry run writes nothing, here or there: no lock (it needs a workspace it may
    # only read), and what it lists is what a push would have found at that moment.
    lock = contextlib.nullcontext() if dry_run else locked(ws.lock_path(SYNC_LOCK), ws.lock_timeout)
    with lock, tempfile.TemporaryDirectory(prefix="accel-") as tmp:
        index = _guard(remote, remote.read_index) or {}
        found, skipped = inventory(ws, include_cache)
        copies = [redacted_copy(f, Path(tmp)) for f in found]
        dropped = [c for c in copies if isinstance(c, Skipped)]
        left_out = {s.unit for s in dropped}  # a run whose record changed: none of it
        files = [c for c in copies if isinstance(c, LocalFile) and c.unit not in left_out]
        skipped += dropped
        plan = plan_push(_with_checksums(files, index), index, skipped)
        if dry_run:
            return SyncResult(plan, remote.url, True)
        mover = _PushUnit(remote, verify, ws)
        try:
            return _execute(plan, remote, reporter or NullReporter(), mover)
        finally:
            if mover.read_checkpoints:  # what retention held back meanwhile, if it may
                catch_up_retention(ws.layout)


def pull(
    ws: Workspace,
    remote: Remote,
    *,
    include_cache: bool = False,
    dry_run: bool = False,
    reporter: Reporter | None = None,
) -> SyncResult:
    """Copy what this workspace lacks from ``remote``, verified before it is visible.

    Only known files in known places are considered (:mod:`accel.sync._trust`); the
    rest of the remote, and checkpoints of a series a live run holds here, are refused
    and listed in ``plan.refused`` (the result is then not ``ok``).
    """
    index = _guard(remote, remote.read_index)
    if index is None:
        raise UsageError(f"nothing was pushed to {remote.url} (no {INDEX_NAME} there)")
    in_scope = {
        r: e for r, e in index.items() if include_cache or not r.startswith(f"{CACHE_DIR}/")
    }
    accepted, refused = screen(in_scope)
    paths = {rel: str(_pulled_to(ws, rel)) for rel in accepted}
    view = _local_view(ws, accepted) if ws.exists else LocalView({})
    plan = plan_pull(accepted, view, include_cache, paths)
    plan = _without_refused_places(ws, plan, refused)
    if dry_run:
        return SyncResult(plan, remote.url, True)
    ws.ensure()
    with locked(ws.lock_path(SYNC_LOCK), ws.lock_timeout):
        return _execute(plan, remote, reporter or NullReporter(), PullUnit(ws, remote, accepted))


def _pulled_to(ws: Workspace, rel: str) -> Path:
    """Where ``rel`` lands: its place, but the config goes aside."""
    from accel.sync.pulled import pulled_path

    return pulled_path(ws) if kind_of(rel) == CONFIG else local_path(ws, rel)


def _refuse_a_workspace(ws: Workspace, remote: Remote) -> None:
    """A push never writes into a workspace: another's (its config would be replaced by
    a redacted copy, its series written without their leases), nor this one."""
    marker = _guard(remote, remote.workspace_marker)
    if marker is not None:
        raise UsageError(
            f"{remote.url} is an accel workspace (it holds {marker}): push to a folder of "
            "its own, never into a workspace"
        )
    folder = Path(os.path.realpath(remote.root))
    for mine in (ws.path, ws.layout.data) if remote.local else ():
        if Path(os.path.realpath(mine)) in (folder, *folder.parents):
            raise UsageError(
                f"{remote.url} is inside this workspace ({mine}): push to a folder of its own"
            )


def _without_refused_places(ws: Workspace, plan: SyncPlan, refused: list[Skipped]) -> SyncPlan:
    """Units this pull may not write here are refused, one line per cause: the checkpoints
    of a series a live run holds, and the units whose place is reached through a link."""
    held = _live_series(ws, plan)
    causes: dict[str, str] = {}  # what a refusal is listed by -> its reason
    blocked: set[str] = set()
    for unit, transfers in plan.units():
        cause = _refused_here(ws, transfers, held)
        if cause is not None:
            blocked.add(unit)
            causes.setdefault(*cause)
    keep = tuple(t for t in plan.transfers if t.unit not in blocked)
    refused = refused + [Skipped(key, why) for key, why in causes.items()]
    return replace(plan, transfers=keep, refused=tuple(refused))


def _live_series(ws: Workspace, plan: SyncPlan) -> dict[str, str]:
    """``checkpoints/<series>`` -> why, for the series of the plan a live run holds here."""
    from accel.store.lease import holder_of

    series = {t.unit.split("/")[1] for t in plan.transfers if t.kind == CHECKPOINT}
    held = {}
    for name in sorted(series) if ws.exists else ():
        holder = holder_of(ws.layout, name)
        if holder is not None:
            who = f"run {holder.run_id}" if holder.run_id else f"pid {holder.pid}"
            held[f"{CHECKPOINTS_DIR}/{name}"] = (
                f"refused: the series {name!r} is held by the live {who} (pid {holder.pid} "
                f"on {holder.host}); pull never writes into it: pull again once it ended"
            )
    return held


def _refused_here(
    ws: Workspace, transfers: list[Transfer], held: dict[str, str]
) -> tuple[str, str] | None:
    """(what the refusal is listed by, why) when the unit of ``transfers`` may not be
    written here."""
    series = "/".join(transfers[0].unit.split("/")[:2])
    if transfers[0].kind == CHECKPOINT and series in held:
        return series, held[series]
    link = link_in_the_way(ws, transfers)
    if link is None:
        return None
    return os.path.relpath(link, ws.layout.data), f"refused: {link_refusal(link)}"


def _guard(remote: Remote, fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except AccelError:
        raise
    except Exception as exc:
        if not from_backend(exc):
            raise
        raise backend_error(remote.url, exc) from None


def _with_checksums(files: list[LocalFile], index: dict[str, FileEntry]) -> list[LocalFile]:
    wanted = set(needs_checksum(files, index))
    out = []
    for f in files:
        if f.rel in wanted:
            with contextlib.suppress(OSError, ValueError):  # gone, or not a regular file
                checksum, size = hash_file(f.path)
                f = LocalFile(f.rel, f.path, size, checksum, f.unit, f.kind)
        out.append(f)
    return out


class _Mover(Protocol):
    def __call__(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None: ...

    def flush(self) -> None: ...


class _PushUnit:
    """Push one unit after another. A checkpoint is read under its series' readers lock,
    as ``checkpoints export`` reads one: retention (a live run's ``keep_last``) retires
    none of it half-way through, which left its first files on the remote for good,
    listed by no index; it is held back for that checkpoint only, and paid after."""

    def __init__(self, remote: Remote, verify: bool, ws: Workspace) -> None:
        self.remote, self.verify, self.ws = remote, verify, ws
        self.done: dict[str, FileEntry] = {}
        self._last_write = time.monotonic()
        self.read_checkpoints = False

    def __call__(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        with contextlib.ExitStack() as reading:
            if transfers[0].kind == CHECKPOINT:  # checkpoints/<series>/step-N
                lock = series_readers_lock(self.ws.path, unit.split("/")[1])
                reading.enter_context(shared(lock, self.ws.lock_timeout))
                self.read_checkpoints = True
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
        if unit.endswith(ENTRY_SUFFIX) and local_path(ws, f"{unit}/{CACHE_META}").parent.is_dir():
            units.add(unit)
        mine = _file_here(local_path(ws, rel), entry)
        if kind_of(rel) == CONFIG and mine != entry:  # the config as pulled aside before
            mine = _file_here(_pulled_to(ws, rel), entry)
        if mine is not None:
            files[rel] = mine
    return LocalView(files, frozenset(units), frozenset(live_run_ids(ws.layout)))


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
    except (OSError, ValueError):  # gone, or not a regular file: not the remote's file
        return None
    return FileEntry(size, checksum)


def _execute(plan: SyncPlan, remote: Remote, reporter: Reporter, move: _Mover) -> SyncResult:
    """Move unit by unit; a unit that fails is reported and the others still move."""
    started = time.monotonic()
    failed: list[Skipped] = []
    retired: list[Skipped] = []
    files = moved_bytes = 0
    reporter.begin(plan.total_bytes, len(plan.transfers))
    try:
        for unit, transfers in plan.units():
            try:
                move(unit, transfers, reporter)
            except (AccelError, FileNotFoundError) as exc:
                if _retired(plan, transfers, exc):
                    retired.append(Skipped(unit, "removed here while it was pushed (retention)"))
                else:
                    failed.append(Skipped(unit, _reason(exc)))
                continue
            except Exception as exc:
                if not from_backend(exc):
                    raise
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
    plan = replace(plan, skipped=plan.skipped + tuple(retired))
    return SyncResult(plan, remote.url, False, files, moved_bytes, elapsed, tuple(failed))


def _retired(plan: SyncPlan, transfers: list[Transfer], exc: BaseException) -> bool:
    """A checkpoint whose folder vanished while it was pushed: retention retired it (a
    newer one replaces it), not a checkpoint push failed to send."""
    step_dir = transfers[-1].local.parent  # the manifest, last: in the step folder
    return (
        plan.direction == PUSH
        and isinstance(exc, FileNotFoundError)
        and transfers[-1].kind == CHECKPOINT
        and not step_dir.exists()
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "a file vanished while it was synced"
    return str(exc)
