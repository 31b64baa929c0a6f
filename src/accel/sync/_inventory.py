"""What the local workspace holds that sync may push: reading only.

- committed checkpoints: a step folder whose manifest is valid and whose files are all
  there with the sizes it records (their checksums come from the manifest, not a hash);
- the files of finished runs (``accel.runs.is_live`` is false);
- the config file;
- with ``include_cache``, the cache (committed entries only: ``meta.json`` present).

Never locks, temp debris, hidden files, ``state.bin`` or ``layout.json``; links are not
followed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from accel.layout import (
    CACHE_DIR,
    CACHE_META,
    CHECKPOINTS_DIR,
    CONFIG_NAME,
    CONFIG_REL,
    ENTRY_SUFFIX,
    LOCAL_RUN,
    MANIFEST,
    RUN_FILE_RE,
    RUN_RECORD,
    RUNS_REL,
    STAGE_PREFIX,
)
from accel.sync._model import CACHE, CHECKPOINT, CONFIG, RUN, FileEntry, LocalFile, Skipped
from accel.sync._paths import MARKERS, is_debris

if TYPE_CHECKING:
    from accel.workspace import Workspace

# A *** standing for a whole YAML scalar: after a key's ': ' (block or flow style) or a flow
# collection's '{', '[' or ',', before the end of the line, a comment or the flow's ',', '}'
# or ']'. Bare, it starts an alias; quoted, the uploaded config still parses.
_BARE_REDACTED = re.compile(
    r"((?:^|[^\\'\"])(?::|[{\[,])[ \t]+|[{\[])\*\*\*(?=[ \t]*(?:[,}\]]|#.*)?$|[ \t]*[,}\]])",
    re.MULTILINE,
)


def inventory(ws: Workspace, include_cache: bool) -> tuple[list[LocalFile], list[Skipped]]:
    """The files to consider for a push, and the units left out with the reason."""
    files: list[LocalFile] = []
    skipped: list[Skipped] = []
    files += _config(ws)
    for found in (_checkpoints(ws), _runs(ws), _cache(ws) if include_cache else iter(())):
        for item in found:
            if isinstance(item, Skipped):
                skipped.append(item)
            else:
                files.append(item)
    return files, skipped


def redacted_copy(f: LocalFile, folder: Path) -> LocalFile | Skipped:
    """What is uploaded for ``f``: the config and run records with every secret hidden
    (a copy in ``folder`` when that changes them), anything else as it is.

    A run record is always uploaded from a copy in ``folder`` of the bytes read with the
    run reader's bound (:data:`accel.runs.record.RECORD_MAX_BYTES`), never more; one that
    cannot be read so (it changed since :func:`inventory` looked) is its run's
    :class:`Skipped`, blocking: none of that run's files may go."""
    if f.kind not in (CONFIG, RUN) or f.path.name not in (CONFIG_NAME, RUN_RECORD):
        return f
    if f.kind == RUN:
        return _record_copy(f, folder)
    try:
        raw = f.path.read_bytes()
    except OSError:
        return f
    shown = _redacted_bytes(raw, json_record=f.path.name == RUN_RECORD)
    if shown == raw:
        return f
    copy = folder / f"{len(list(folder.iterdir()))}-{f.path.name}"
    copy.write_bytes(shown)
    return LocalFile(f.rel, copy, len(shown), None, f.unit, f.kind)


def _record_copy(f: LocalFile, folder: Path) -> LocalFile | Skipped:
    from accel._fs import parse_json, read_regular
    from accel.runs.record import RECORD_MAX_BYTES

    try:
        raw = read_regular(f.path, RECORD_MAX_BYTES)
        problem = record_problem(parse_json(raw, f.path), f.unit.rsplit("/", 1)[-1])
    except FileNotFoundError:
        if not f.path.parent.is_dir():  # the run folder went (accel clean) while pushed
            return Skipped(f.unit, "removed here while push read it")
        problem = f"{f.path} is missing"
    except (OSError, ValueError) as exc:  # DamagedFile is a ValueError
        problem = str(exc)
    if problem is not None:
        return unreadable_record(f.unit, problem)
    shown = _redacted_bytes(raw, json_record=True)
    copy = folder / f"{len(list(folder.iterdir()))}-{f.path.name}"
    copy.write_bytes(shown)
    return LocalFile(f.rel, copy, len(shown), None, f.unit, f.kind)


def record_problem(record: object, run_id: str) -> str | None:
    """Why ``record`` (a run.json as decoded) is not the record of ``run_id`` that a pull
    takes (:func:`accel.sync._pull.verify_run`), or None."""
    if not isinstance(record, dict):
        return "it does not hold a JSON object"
    if record.get("id", run_id) != run_id:
        return f"it is the record of {str(record.get('id'))[:80]!r}, not of {run_id}"
    return None


def unreadable_record(unit: str, problem: str) -> Skipped:
    """A run push does not send: every pull would refuse it (``accel runs`` shows it)."""
    return Skipped(unit, f"{RUN_RECORD} unreadable ({problem})", blocking=True)


def _redacted_bytes(raw: bytes, *, json_record: bool) -> bytes:
    import json

    from accel._redact import redact_mapping, redact_text

    text = raw.decode("utf-8", "replace")
    if json_record:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            shown = redact_mapping(data)
            if shown == data:
                return raw  # byte for byte: a record accel wrote is already redacted
            return (json.dumps(shown, indent=2, sort_keys=True) + "\n").encode()
    shown_text = redact_text(text)
    if shown_text == text:
        return raw
    # A bare *** starts a YAML alias: quote it so the uploaded config still parses.
    return _BARE_REDACTED.sub(r"\1'***'", shown_text).encode("utf-8")


def _config(ws: Workspace) -> list[LocalFile]:
    try:
        size = ws.config_file.stat().st_size
    except OSError:
        return []
    return [LocalFile(CONFIG_REL, ws.config_file, size, None, CONFIG_REL, CONFIG)]


def _subdirs(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            found = [e for e in it if e.is_dir(follow_symlinks=False) and not is_debris(e.name)]
    except OSError:
        return []
    return sorted(found, key=lambda e: e.name)


def _checkpoints(ws: Workspace) -> Iterator[LocalFile | Skipped]:
    for series in _subdirs(ws.checkpoints_dir):
        for tmp in _saves_in_progress(Path(series.path)):
            unit = f"{CHECKPOINTS_DIR}/{series.name}/{tmp}"
            yield Skipped(unit, "not a checkpoint yet: a save in progress (or one a crash left)")
        for step in _subdirs(Path(series.path)):
            unit = f"{CHECKPOINTS_DIR}/{series.name}/{step.name}"
            yield from checkpoint_files(Path(step.path), unit)


def _saves_in_progress(folder: Path) -> list[str]:
    """The ``.tmp-*`` folders a save (or a pull's stage) writes before its rename."""
    try:
        with os.scandir(folder) as it:
            return sorted(e.name for e in it if e.name.startswith(STAGE_PREFIX) and e.is_dir())
    except OSError:
        return []


def checkpoint_files(step_dir: Path, unit: str) -> Iterator[LocalFile | Skipped]:
    """A committed checkpoint's files (manifest last), or why it is not sent: blocking
    when it is there but cannot be sent whole; not when it was removed while read."""
    from accel.errors import IntegrityError
    from accel.store.hashing import hash_file
    from accel.store.manifest import read_manifest

    def skip(reason: str) -> Skipped:
        if not step_dir.is_dir():  # retired by retention (or deleted) while push read it
            return Skipped(unit, "removed here while push read it (retention or a delete)")
        return Skipped(unit, f"{reason}; `accel checkpoints verify` checks it", blocking=True)

    try:
        manifest = read_manifest(step_dir)
    except IntegrityError as exc:
        yield skip(f"not sent: its manifest is missing or not valid ({exc})")
        return
    found: list[LocalFile] = []
    for name, digest in sorted(manifest.files.items()):
        entry = FileEntry(digest.size, digest.checksum)
        path = step_dir / name
        problem = _file_problem(step_dir, name, entry.size)
        if problem:
            yield skip(f"not sent: {problem}")
            return
        rel = f"{unit}/{name}"
        found.append(LocalFile(rel, path, entry.size, entry.checksum, unit, CHECKPOINT))
    try:
        checksum, size = hash_file(step_dir / MANIFEST)
    except (OSError, ValueError):
        yield skip("not sent: its manifest was replaced or removed while push read it")
        return
    yield from found
    yield LocalFile(f"{unit}/{MANIFEST}", step_dir / MANIFEST, size, checksum, unit, CHECKPOINT)


def _file_problem(step_dir: Path, name: str, size: int) -> str | None:
    """Why the manifest's file ``name`` cannot be sent as it records it, or None."""
    path = step_dir / name
    if is_debris(name):
        return f"its manifest lists {name}, a temp or hidden name push never sends"
    if path.parent != step_dir and path.parent.is_symlink():
        return f"{path.parent.name}/ is a link and push does not follow links"
    found = _size(path)
    if found < 0:
        return f"{name} is missing or not a regular file"
    if found != size:
        return f"{name} has {found} bytes, its manifest records {size}"
    return None


def manifest_entry(raw: object) -> FileEntry | None:
    if not isinstance(raw, dict):
        return None
    size, checksum = raw.get("size"), raw.get("checksum")
    if isinstance(size, bool) or not isinstance(size, int) or not isinstance(checksum, str):
        return None
    return FileEntry(size, checksum)


def _size(path: Path) -> int:
    try:
        st = path.lstat()
    except OSError:
        return -1
    return st.st_size if path.is_file() and not path.is_symlink() else -1


def _runs(ws: Workspace) -> Iterator[LocalFile | Skipped]:
    from accel.runs import is_live

    for run in _subdirs(ws.runs_dir):
        unit = f"{RUNS_REL}/{run.name}"
        if run.name == LOCAL_RUN:  # a script's metrics outside accel launch: no run to pull
            yield Skipped(unit, "metrics of scripts run outside accel launch: kept here")
            continue
        if is_live(ws.layout, run.name):
            yield Skipped(unit, "live run: pushed after it ends")
            continue
        problem = _run_record_problem(ws, run.name)
        if problem is not None:  # every pull would refuse the run: it stays here
            yield unreadable_record(unit, problem)
            continue
        for item in _tree(Path(run.path), unit, RUN):
            # The pull's allowlist, applied here too: a user's notebook in a run folder
            # stays local instead of going up to be refused by every pull.
            if isinstance(item, LocalFile) and not RUN_FILE_RE.fullmatch(item.rel[len(unit) + 1 :]):
                item = Skipped(item.rel, "not a file accel writes in a run folder; kept local")
            yield item


def _run_record_problem(ws: Workspace, run_id: str) -> str | None:
    """Why the run's run.json cannot be read by the runs' own bounded reader
    (:func:`accel.runs.read_run`: a FIFO, a link, beyond its size or depth limit, not
    JSON), or is not this run's record; None when it reads (or there is none)."""
    from accel.runs import read_record, read_run

    problem = read_run(ws.layout, run_id).problem
    if problem is not None:
        return problem
    record = read_record(ws.runs_dir / run_id)
    return None if record is None else record_problem(record, run_id)


def _cache(ws: Workspace) -> Iterator[LocalFile | Skipped]:
    yield from _tree(ws.cache_dir, CACHE_DIR, CACHE)


def _tree(root: Path, prefix: str, kind: str) -> Iterator[LocalFile | Skipped]:
    """Regular files under ``root``; a cache entry folder counts only once committed."""
    stack = [(root, prefix)]
    while stack:
        folder, rel = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        if kind == CACHE and folder.name.endswith(ENTRY_SUFFIX):
            yield from _cache_entry(folder, rel)
            continue
        for entry in entries:
            if is_debris(entry.name):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), f"{rel}/{entry.name}"))
            elif entry.is_file(follow_symlinks=False):
                yield _plain(Path(entry.path), f"{rel}/{entry.name}", kind, entry)


def _cache_entry(folder: Path, rel: str) -> Iterator[LocalFile | Skipped]:
    """A committed entry's ``meta.json`` and the payload it names, nothing else (a file
    replaced a moment ago may linger beside it: see ``accel.store.cache``)."""
    from accel.errors import IntegrityError
    from accel.store.entry import read_cache_meta
    from accel.sync._trust import cache_key

    try:
        meta = read_cache_meta(folder, cache_key(rel))
    except IntegrityError as exc:
        yield Skipped(rel, f"cache entry not committed or unreadable ({exc})")
        return
    for name in (meta.payload, CACHE_META):  # the commit marker last
        path = folder / name
        size = _size(path)
        if size < 0:
            yield Skipped(rel, f"{name} is missing (replaced or deleted while read)")
            return
        yield LocalFile(f"{rel}/{name}", path, size, None, rel, CACHE)


def _plain(path: Path, rel: str, kind: str, entry: os.DirEntry[str]) -> LocalFile:
    from accel.sync._paths import unit_of

    try:
        size = entry.stat(follow_symlinks=False).st_size
    except OSError:
        size = 0
    return LocalFile(rel, path, size, None, unit_of(rel), kind)


__all__ = ["MARKERS", "checkpoint_files", "inventory", "manifest_entry"]
