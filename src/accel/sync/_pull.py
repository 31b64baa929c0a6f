"""Pulling one unit: staged, verified, then made visible whole (or not at all).

A checkpoint is staged in ``checkpoints/<series>/.tmp-sync-*``, a new run and a cache
entry in ``tmp/``; every file is hashed as it downloads and compared with the index;
then the unit is checked for what it claims to be (the checkpoint's manifest, the run's
record, the entry's ``meta.json``: known files only, in their places) and renamed into
place under a lock. Nothing is visible before that rename, so an interrupted or refused
pull never leaves a half-pulled checkpoint, a run listed as crashed or a torn entry.
A checkpoint is never renamed into a series a live run holds: the series lease is
taken around the rename. The config goes aside (:mod:`accel.sync.pulled`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel._fs import fsync_dir, link_below, make_below, read_json, temp_beside
from accel._locks import locked
from accel.errors import IntegrityError, JobFailed, UsageError
from accel.layout import (
    CACHE_LOCK,
    CACHE_META,
    MANIFEST,
    OWNER_MARKER,
    RUN_RECORD,
    SYNC_COMMIT_LOCK,
    SYNC_STAGE_PREFIX,
    make_owned_dir,
)
from accel.sync._model import CACHE, CHECKPOINT, CONFIG, RUN, FileEntry, Reporter, Transfer
from accel.sync._paths import local_path
from accel.sync._remote import Remote
from accel.sync._trust import PLAIN_NAME, cache_key

if TYPE_CHECKING:
    from accel.workspace import Workspace

META = CACHE_META


class PullUnit:
    """Moves one unit of a pull plan into the workspace (see the module docstring)."""

    def __init__(self, ws: Workspace, remote: Remote, index: dict[str, FileEntry]) -> None:
        self.ws, self.remote, self.index = ws, remote, index

    def __call__(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        kind = transfers[0].kind
        link = link_in_the_way(self.ws, transfers)  # the plan refused it: one made since
        if link is not None:
            raise JobFailed(link_refusal(link))
        if kind == CONFIG:
            self._config(transfers[0], reporter)
        elif kind == CHECKPOINT:
            self._checkpoint(unit, transfers, reporter)
        elif kind == CACHE:
            self._cache_entry(unit, transfers, reporter)
        elif local_path(self.ws, unit + "/" + RUN_RECORD).parent.is_dir():
            for t in transfers:  # a run folder already here: add what it lacks
                target = local_path(self.ws, t.rel)
                self._folder(target.parent)  # stacks/, tensorboard/rank-N/
                self._one_file(t, target, reporter)
        else:
            self._new_run(unit, transfers, reporter)

    def flush(self) -> None:
        pass

    # -- units ----------------------------------------------------------------------------

    def _checkpoint(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        from accel.errors import LeaseHeld
        from accel.store.lease import SeriesLease

        series = unit.split("/")[1]
        final = self.ws.checkpoints_dir / series / unit.rsplit("/", 1)[-1]
        self._folder(final.parent)
        with self._stage(final.parent / f"{SYNC_STAGE_PREFIX}{uuid.uuid4().hex[:12]}") as stage:
            self._download(unit, transfers, stage, reporter)
            verify_checkpoint(stage, unit, self.index)
            try:
                with SeriesLease(self.ws.layout, series):  # a live run may have taken it meanwhile
                    self._commit(stage, final, self.ws.lock_path(SYNC_COMMIT_LOCK))
            except LeaseHeld as exc:
                raise JobFailed(f"{exc}: pull never writes into a live series") from None

    def _cache_entry(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        final = local_path(self.ws, f"{unit}/{CACHE_META}").parent
        with self._stage(self.ws.tmp_dir / f"sync-{uuid.uuid4().hex[:12]}") as stage:
            self._download(unit, transfers, stage, reporter)
            verify_cache_entry(stage, unit, self.index)
            self._folder(final.parent)
            self._commit(stage, final, self.ws.lock_path(CACHE_LOCK))

    def _new_run(self, unit: str, transfers: list[Transfer], reporter: Reporter) -> None:
        final = local_path(self.ws, unit + "/" + RUN_RECORD).parent
        with self._stage(self.ws.tmp_dir / f"sync-{uuid.uuid4().hex[:12]}") as stage:
            self._download(unit, transfers, stage, reporter)
            verify_run(stage, unit)
            self._folder(final.parent)
            (stage / OWNER_MARKER).unlink()  # a run folder is proved by its run.json
            self._commit(stage, final, self.ws.lock_path(SYNC_COMMIT_LOCK))

    def _config(self, t: Transfer, reporter: Reporter) -> None:
        from accel.config.edit import SECRET_MODE
        from accel.sync.pulled import checked, pulled_path

        aside = pulled_path(self.ws)
        aside.parent.mkdir(parents=True, exist_ok=True)

        def check(tmp: Path) -> None:
            checked(tmp.read_text(encoding="utf-8", errors="replace"), "the remote's config")

        # Private whatever it holds: the remote's launch.env may carry its tokens.
        self._one_file(t, aside, reporter, check, perms=SECRET_MODE)

    # -- pieces ---------------------------------------------------------------------------

    def _one_file(
        self, t: Transfer, target: Path, reporter: Reporter, check: Any = None, perms: int = 0o666
    ) -> None:
        """Download ``t`` to ``target`` (temp beside it, mode ``perms`` & ~umask, verified,
        renamed), in the folder it goes in, made by the caller."""
        tmp = temp_beside(target)  # a killed pull's is crash debris to `accel clean`
        try:
            self.remote.download(t.rel, tmp, self.index[t.rel], reporter.advance, perms=perms)
            if check is not None:
                check(tmp)
            elif target.name == RUN_RECORD:
                _record_of(tmp, t.unit)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        fsync_dir(target.parent)

    def _folder(self, folder: Path) -> None:
        """``folder`` made in the data folder, never through a link (one made since the
        unit was checked is refused as the plan refuses one)."""
        link = make_below(self.ws.layout.data, folder)
        if link is not None:
            raise JobFailed(link_refusal(link))

    def _download(self, unit: str, transfers: list[Transfer], stage: Path, rep: Reporter) -> None:
        for t in transfers:  # commit markers come last in plan order
            dest = stage / t.rel[len(unit) + 1 :]
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.remote.download(t.rel, dest, self.index[t.rel], rep.advance)

    @contextlib.contextmanager
    def _stage(self, stage: Path) -> Iterator[Path]:
        make_owned_dir(stage, parents=True)  # provably accel's, should the pull die half-way
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _commit(self, stage: Path, final: Path, lock: Path) -> None:
        fsync_dir(stage)
        with locked(lock, self.ws.lock_timeout):
            if os.path.lexists(final):
                raise UsageError(f"{final} appeared while it was pulled; kept the local one")
            os.rename(stage, final)
        fsync_dir(final.parent)


# -- where a unit may go -------------------------------------------------------------------

_MARKER = {CHECKPOINT: MANIFEST, RUN: RUN_RECORD, CACHE: CACHE_META}


def link_in_the_way(ws: Workspace, transfers: list[Transfer]) -> str | None:
    """The symbolic link in the workspace a pull of one unit (its ``transfers``) would
    write through, or None: on the way to its folder, to a folder in it (a run folder
    already here gets its files in place: ``stacks/``, ``tensorboard/rank-N/``), or to the
    staging folder. The config goes aside in the workspace's own ``config/``, which a
    dotfile manager may link: not looked at."""
    unit, kind = transfers[0].unit, transfers[0].kind
    if kind == CONFIG:
        return None
    place = local_path(ws, f"{unit}/{_MARKER[kind]}").parent
    inside = sorted({local_path(ws, t.rel).parent for t in transfers} - {place})
    staged = [] if kind == CHECKPOINT else [ws.tmp_dir]  # a checkpoint is staged beside it
    for folder in (place, *inside, *staged):
        link = link_below(ws.layout.data, folder)
        if link is not None:
            return link
    return None


def link_refusal(link: str) -> str:
    return (
        f"{link} is a symbolic link; pull never writes through a link, which could lead "
        "out of the workspace: remove it (workspace.path moves the data)"
    )


# -- what a unit must be ------------------------------------------------------------------
# A refusal's reason names no unit: it is listed, and shown, after its unit.


def verify_checkpoint(stage: Path, unit: str, index: dict[str, FileEntry]) -> None:
    """The manifest is one the store reads (``accel.store.manifest``: the one reader),
    for this series and step, and lists exactly the files pulled with the index's sizes
    and checksums."""
    from accel.store.manifest import read_manifest

    try:  # validated as if it were already in its step folder
        manifest = read_manifest(stage, unit.rsplit("/", 1)[-1])
    except IntegrityError as exc:
        raise IntegrityError(f"its manifest is not one accel can read ({exc}); refused") from None
    series = unit.split("/")[1]
    if manifest.series != series:
        raise IntegrityError(
            f"its manifest names the series {manifest.series!r}, not {series!r}; refused"
        )
    pulled = {rel[len(unit) + 1 :] for rel in index if rel.startswith(unit + "/")}
    if pulled != set(manifest.files) | {MANIFEST}:
        raise IntegrityError("its manifest does not match the files pulled; refused")
    for name, digest in manifest.files.items():
        if FileEntry(digest.size, digest.checksum) != index[f"{unit}/{name}"]:
            raise IntegrityError(f"{name} does not match its manifest; refused")


def verify_cache_entry(stage: Path, unit: str, index: dict[str, FileEntry]) -> None:
    """``meta.json`` is one the cache reads (``accel.store.entry``: the one reader), for
    this key, naming the one payload pulled beside it (never a path out of the entry)."""
    from accel.store.entry import read_cache_meta

    try:
        meta = read_cache_meta(stage, cache_key(unit))
    except IntegrityError as exc:
        raise IntegrityError(f"its {META} is not valid ({exc}); refused") from None
    files = {rel[len(unit) + 1 :] for rel in index if rel.startswith(unit + "/")}
    problem = None
    if not PLAIN_NAME.fullmatch(meta.payload.rsplit("/", 1)[-1]):
        problem = f"names the payload {meta.payload[:100]!r}, which is not a plain file name"
    elif files != {META, meta.payload}:
        problem = "does not describe the files pulled"
    elif FileEntry(meta.size, meta.checksum) != index[f"{unit}/{meta.payload}"]:
        problem = "does not match its payload"
    if problem is not None:
        raise IntegrityError(f"its {META} {problem}; refused")


def verify_run(stage: Path, unit: str) -> None:
    """A new run comes with its record, or it would be listed as crashed."""
    if not (stage / RUN_RECORD).is_file():
        raise IntegrityError(f"no {RUN_RECORD} on the remote; refused")
    _record_of(stage / RUN_RECORD, unit)


def _record_of(path: Path, unit: str) -> None:
    run_id = unit.rsplit("/", 1)[-1]
    try:
        record = read_json(path)
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"its {RUN_RECORD} is not JSON ({exc}); refused") from None
    if not isinstance(record, dict) or record.get("id", run_id) != run_id:
        raise IntegrityError(f"its {RUN_RECORD} is not the record of {run_id}; refused")
