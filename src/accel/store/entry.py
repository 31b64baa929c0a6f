"""A cache entry on disk: its one reader and its one writer.

::

    cache/entries/<key>.entry/       the key ``a/b`` lives in ``entries/a/b.entry/``
      .accel-owned                   created first: the folder is accel's
      v<16 hex>/<payload>            one immutable version of the value
      meta.json                      written last; replaced whole by every put

``meta.json``: ``{"format": 1, "key", "kind", "payload", "size", "checksum", "created",
"last_used", "run_id"}`` and, for files, ``"verified"``: the ``[device, inode, size,
mtime_ns, ctime_ns]`` of the payload when it last matched its checksum. ``payload`` is
``v<16 hex>/<name>`` (entries written before versions: a bare ``<name>``); it can only
name a file inside its entry. Times are ``time.time()`` seconds recorded in the file.

A payload file is never changed once it is in its entry: a put adds a new version
folder and replaces ``meta.json`` (both under the cache lock), then removes the old
version. So a reader needs no lock: it reads ``meta.json``, then the payload it names;
if that version was replaced in between, the file is gone and it reads ``meta.json``
again. An entry whose ``meta.json`` this reader refuses is no entry: it is reported,
never returned and never deleted. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from accel import _faults
from accel._fs import JSON_INT_MAX, atomic_write_json, link_below, read_json, remove_tree
from accel.errors import IntegrityError, MetaMissing, UsageError
from accel.layout import (
    CACHE_META,
    ENTRY_SUFFIX,
    OWNER_MARKER,
    VERSION_RE,
    detach,
    foreign_files,
    is_atomic_temp,
    is_owned,
    remove_own,
)
from accel.store._records import (
    MAX_SECONDS,
    Invalid,
    digest_fields,
    is_int,
    optional_str,
    seconds,
    versioned_object,
)
from accel.store.hashing import FileDigest

__all__ = [
    "FORMAT",
    "KINDS",
    "CacheMeta",
    "MetaMissing",
    "check_key",
    "entry_file",
    "entry_folders",
    "foreign_in_entry",
    "holds_only_own",
    "is_utf8",
    "key_of",
    "key_problem",
    "parse_cache_meta",
    "read_cache_meta",
    "strip_entry",
    "write_cache_meta",
]

FORMAT = 1
KINDS = frozenset({"json", "bytes", "tensors", "file"})
PAYLOAD_NAMES = {"json": "value.json", "bytes": "data.bin", "tensors": "value.tensors"}
RESERVED = frozenset({CACHE_META, OWNER_MARKER})
META_MAX_BYTES = 1 << 20
_PAYLOAD_RE = re.compile(rf"(?:{VERSION_RE.pattern}/)?[^/\\\x00]+")  # [version/]name
_NOT_A_NAME = frozenset({".", "..", CACHE_META, OWNER_MARKER})
_NUMBERS = (int, float)
# How long a replaced file payload stays, for paths handed out before it was replaced.
SUPERSEDED_GRACE = 60.0


Stamp = tuple[int, int, int, int, int]


class CacheMeta(NamedTuple):
    """One ``meta.json``. A NamedTuple, not a frozen dataclass: ``accel clean`` builds one
    per entry, 100,000 in a large cache, and this is several times cheaper to build."""

    key: str
    kind: str
    payload: str
    size: int
    checksum: str
    created: float
    last_used: float
    run_id: str | None
    verified: Stamp | None = None

    @property
    def digest(self) -> FileDigest:
        return FileDigest(self.size, self.checksum)

    def touched(self, when: float, run_id: str | None, verified: Stamp | None) -> CacheMeta:
        return self._replace(last_used=when, run_id=run_id, verified=verified or self.verified)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": FORMAT,
            "key": self.key,
            "kind": self.kind,
            "payload": self.payload,
            "size": self.size,
            "checksum": self.checksum,
            "created": self.created,
            "last_used": self.last_used,
            "run_id": self.run_id,
        }
        if self.verified is not None:
            data["verified"] = list(self.verified)
        return data


# -- keys: ``/``-separated names that can never address anything outside the cache ------

MAX_KEY_LENGTH = 512
MAX_SEGMENT_BYTES = 200  # leaves room for ".entry" and temp suffixes under NAME_MAX


def key_problem(key: Any) -> str | None:
    """Why ``key`` is not a valid cache key, or None."""
    if not isinstance(key, str):
        return f"it is a {type(key).__name__}, not a string"
    if not key:
        return "it is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"it is longer than {MAX_KEY_LENGTH} characters"
    if "\\" in key:
        return "it contains a backslash (use '/' between namespaces)"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in key):
        return "it contains a control character"
    if not key.isascii() and not is_utf8(key):
        return "it is not valid UTF-8 text"
    for segment in key.split("/"):
        problem = _segment_problem(segment)
        if problem:
            return problem
    return None


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes: a lone surrogate (how Python holds the bytes of a name
    that is not UTF-8, as argv and file names reach it) has no UTF-8 form."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _segment_problem(segment: str) -> str | None:
    if not segment:
        return "it has an empty part (leading, trailing or doubled '/')"
    if segment.startswith("."):
        return f"its part {segment!r} starts with '.'"
    if segment.endswith(ENTRY_SUFFIX):
        return f"its part {segment!r} ends with {ENTRY_SUFFIX!r}"
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        return f"a part is longer than {MAX_SEGMENT_BYTES} bytes"
    return None


def check_key(key: Any) -> str:
    problem = key_problem(key)
    if problem:
        raise UsageError(
            f"invalid cache key {key!r}: {problem}; use names like 'datasets/train-index' "
            "(parts separated by '/', no '..', no leading '.' or '/')"
        )
    return str(key)


def key_of(entry: Path, entries_root: Path) -> str:
    """The key an entry folder stands for (its path below ``entries/``)."""
    rel = entry.relative_to(entries_root).as_posix()
    return rel[: -len(ENTRY_SUFFIX)]


def entry_folders(entries_root: Path) -> Iterator[Path]:
    """Every ``*.entry`` folder under ``entries/``, not following links (committed or
    not); needs no settings, so a listing reads it under an invalid config too."""
    stack = [entries_root]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for item in it:
                    if not item.is_dir(follow_symlinks=False) or item.name.startswith("."):
                        continue
                    if item.name.endswith(ENTRY_SUFFIX):
                        yield Path(item.path)
                    else:
                        stack.append(Path(item.path))
        except OSError:
            continue


def read_cache_meta(entry: Path, key: str | None = None) -> CacheMeta:
    """The metadata of the entry folder ``entry``, validated; IntegrityError otherwise.

    ``key``: the key the folder stands for, which ``meta.json`` must record. A missing
    ``meta.json`` raises :class:`MetaMissing`. Links are never followed.
    """
    path = entry / CACHE_META
    try:
        data = read_json(path, limit=META_MAX_BYTES)  # a FIFO, a device, a deep nest: refused
    except FileNotFoundError:
        raise MetaMissing(f"{entry} has no {CACHE_META}") from None
    return parse_cache_meta(data, str(path), key)


def parse_cache_meta(data: Any, where: str, key: str | None = None) -> CacheMeta:
    """Cache metadata from decoded JSON ``data`` (``where`` names it in errors)."""
    fast = _parse_fast(data, key)
    return fast if fast is not None else _parse_checked(data, where, key)


def _parse_fast(data: Any, key: str | None) -> CacheMeta | None:
    """The metadata of a well-formed record, else None (then the full check says why).

    The hot path of a 100,000-entry clean: inline checks, no calls, no error text.
    """
    if type(data) is not dict:
        return None
    try:
        fmt, found, kind, payload = data["format"], data["key"], data["kind"], data["payload"]
        size, checksum, created, used = (
            data["size"],
            data["checksum"],
            data["created"],
            data["last_used"],
        )
    except KeyError:
        return None
    run_id = data.get("run_id")
    ok = (
        fmt == FORMAT
        and type(fmt) is int
        and type(found) is str
        and (key is None or found == key)
        and kind in KINDS
        and type(size) is int
        and 0 <= size <= JSON_INT_MAX
        and type(checksum) is str
        and checksum != ""
        and type(created) in _NUMBERS
        and type(used) in _NUMBERS
        and 0 <= created <= MAX_SECONDS  # false for nan, inf and 1e308 alike
        and 0 <= used <= MAX_SECONDS
        and (run_id is None or type(run_id) is str)
        and type(payload) is str
        and _PAYLOAD_RE.fullmatch(payload) is not None
        and payload.rpartition("/")[2] not in _NOT_A_NAME
    )
    if not ok:
        return None
    verified = data.get("verified")
    stamp = None if verified is None else _stamp(verified)
    created, used = float(created), float(used)
    return CacheMeta(found, kind, payload, size, checksum, created, used, run_id, stamp)


def _parse_checked(data: Any, where: str, key: str | None) -> CacheMeta:
    bad = Invalid("cache entry record", where)
    data = versioned_object(data, FORMAT, bad, "cache")
    found = data.get("key")
    if not isinstance(found, str) or (key is not None and found != key):
        raise bad(f"it is for the key {found!r}, not {key!r}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise bad(f"its kind is {kind!r}")
    fields = digest_fields(data)
    if fields is None:
        raise bad("it has no size and checksum")
    created = seconds(data.get("created"), "created", bad)
    last_used = data.get("last_used")
    return CacheMeta(
        key=found,
        kind=kind,
        payload=_payload(data.get("payload"), bad),
        size=fields[0],
        checksum=fields[1],
        created=created,
        last_used=created if last_used is None else seconds(last_used, "last_used", bad),
        run_id=optional_str(data, "run_id", bad),
        verified=_stamp(data.get("verified")),
    )


def write_cache_meta(entry: Path, meta: CacheMeta, *, durable: bool = True) -> None:
    """Replace ``entry``'s ``meta.json`` atomically (a reader sees the old or the new)."""
    atomic_write_json(entry / CACHE_META, meta.to_json(), durable=durable)


def version_dirs(entry: Path) -> list[str]:
    """Names of the payload version folders in ``entry``."""
    try:
        return [n for n in os.listdir(entry) if VERSION_RE.fullmatch(n)]
    except OSError:
        return []


# -- the entry folder (the caller holds the cache lock) ----------------------------------


def prune(entry: Path, meta: CacheMeta, old: CacheMeta | None) -> None:
    """Under the lock: remove the versions ``meta`` replaced.

    A replaced file stays for ``SUPERSEDED_GRACE`` seconds (its folder's mtime says
    since when): a path :meth:`Cache.path` handed out just before stays readable.
    """
    current = meta.payload.split("/")[0]
    now = time.time()
    replaced = old.payload.split("/")[0] if old is not None else current
    if old is not None and replaced != current:
        if old.kind == "file" and "/" in old.payload:
            with contextlib.suppress(OSError):  # replaced now: its grace starts now
                os.utime(entry / replaced, (now, now))
        elif replaced not in RESERVED:
            remove_tree(entry / replaced)  # a value read whole by get(): nobody holds it
    for name in version_dirs(entry):
        if name != current and _stale(entry / name, now):
            remove_tree(entry / name)
    _faults.point("cache.put.pruned")


def _stale(version: Path, now: float) -> bool:
    try:
        return now - os.lstat(version).st_mtime >= SUPERSEDED_GRACE
    except FileNotFoundError:
        return False


def made_by_accel(entry: Path, key: str) -> bool:
    """accel made this entry folder: it has the owner marker, or readable metadata."""
    if is_owned(entry):
        return True
    try:
        read_cache_meta(entry, key)
    except IntegrityError:
        return False
    return True


def _ours(entry: Path, root: Path, key: str) -> bool:
    """A real folder accel made, inside the cache (not through a linked namespace)."""
    if link_below(root, entry) is not None or not entry.is_dir():
        return False
    return made_by_accel(entry, key)


def entry_file(payload: str | None) -> Callable[[str], bool]:
    """The allowlist of an entry's own files (relative paths): its record, its marker,
    interrupted atomic writes, the files of its version folders, a bare ``payload``."""

    def own(rel: str) -> bool:
        head, _, tail = rel.partition("/")
        if tail:
            return "/" not in tail and VERSION_RE.fullmatch(head) is not None
        return rel in (CACHE_META, OWNER_MARKER, payload) or is_atomic_temp(rel)

    return own


def foreign_in_entry(entry: str | Path, payload: str | None) -> list[str]:
    """Files in ``entry`` that accel did not make (a user's README): never deleted with it.
    A plan asks it of 10,000s of entries: the path may stay the scan's text."""
    if holds_only_own(os.fspath(entry), payload):  # the common case: one or two listings
        return []
    return foreign_files(Path(entry), entry_file(payload))


_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def holds_only_own(entry: str, payload: str | None) -> bool:
    """True when ``entry`` is a folder (not a link to one) whose listing and whose version
    folders' show accel's files only (what :func:`entry_file` accepts): a clean plan asks
    it of 10,000s of entries. False for anything else (a link, a folder in a version
    folder, another folder, a file of the user's, a listing that fails): the full walk of
    :func:`foreign_files` decides, behind its caller's own check for links."""
    try:
        fd = os.open(entry, _LIST_FLAGS)
    except OSError:
        return False
    try:
        with os.scandir(fd) as it:
            listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for name, is_dir in listed:
            if not is_dir:
                if name not in (CACHE_META, OWNER_MARKER, payload) and not is_atomic_temp(name):
                    return False
            elif VERSION_RE.fullmatch(name) is None:
                return False
            else:
                sub = os.open(name, _LIST_FLAGS, dir_fd=fd)
                try:
                    with os.scandir(sub) as it:
                        if any(e.is_dir(follow_symlinks=False) for e in it):
                            return False
                finally:
                    os.close(sub)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def strip_entry(entry: Path, root: Path, key: str) -> list[str]:
    """Under the lock: when accel's entry holds files accel did not make, remove accel's
    (the marker and ``meta.json`` first: it is no entry from then on) and keep the folder
    with those; their names ([] when there are none: detach it as usual)."""
    if not _ours(entry, root, key):
        return []
    try:
        payload: str | None = read_cache_meta(entry, key).payload
    except (IntegrityError, OSError):
        payload = None
    foreign = foreign_in_entry(entry, payload)
    if foreign:
        remove_own(entry, entry_file(payload), (OWNER_MARKER, CACHE_META))
    return foreign


def detach_entry(entry: Path, root: Path, key: str) -> Path | None:
    """Under the lock: rename the entry to a ``.del-*`` sibling, when it is accel's.

    A link (to anywhere) or a folder without accel's marker or metadata is left alone.
    """
    if not _ours(entry, root, key):
        return None
    try:
        return detach(entry)
    except FileNotFoundError:
        return None


# -- validation -----------------------------------------------------------------------------


def _payload(value: Any, bad: Invalid) -> str:
    """``v<hex>/<name>`` or a bare ``<name>``: a file of this entry, nothing else."""
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) == 2 and VERSION_RE.fullmatch(parts[0]) and file_name_ok(parts[1]):
        return str(value)
    if len(parts) == 1 and file_name_ok(parts[0]):
        return str(value)
    raise bad(f"its payload {value!r} is not a file inside the entry")


def file_name_ok(name: str) -> bool:
    """A plain file name a payload may have (no path, not one of accel's own names)."""
    if not name or name in (".", "..") or name in RESERVED:
        return False
    return not any(ch in name for ch in ("/", "\\", "\0"))


def _stamp(value: Any) -> Stamp | None:
    if isinstance(value, list) and len(value) == 5 and all(is_int(v) for v in value):
        return (value[0], value[1], value[2], value[3], value[4])
    return None
