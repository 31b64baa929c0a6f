"""The cache: artifacts by key (tensors, plain values, bytes, files).

Each entry is a folder ``cache/entries/<key>.entry/`` (its format:
:mod:`accel.store.entry`). A put writes the payload into a staged version folder in
``tmp/``, then, under ``locks/cache.lock``, moves it into the entry, replaces
``meta.json`` and removes the version it replaced. Payload files never change once in
place, so reads take no lock: a reader whose version was replaced meanwhile reads
``meta.json`` again, and a concurrent put or clean never makes it report a corrupt
payload or miss a key that exists. Every payload is verified against its checksum
before it is returned; a file's checksum is recomputed whenever the file may have
changed since it was last verified (see :meth:`Cache.path`).

Deleting takes the lock, renames the entry to a ``.del-*`` sibling (fsynced), then
removes it, ``meta.json`` and the owner marker last. Nothing here follows a link: not
to an entry, nor to a namespace or version folder on the way to one (a get or a path
refuses it, IntegrityError; a put refuses it, UsageError; a delete leaves it alone).

Payload files are written with a checksum and fsync and read back only verified. A
JSON, bytes or tensor payload is read whole and checked against its checksum every
time. A file payload is handed out as a path, so it is checked before: hashed in full
unless it is provably unchanged since it last matched (same device, inode, size, mtime
and ctime, recorded at least ``RACY_SECONDS`` after its last change: filesystem
timestamps are coarse, and a write within the same tick could keep them).
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from accel import _faults
from accel._fs import (
    JSON_DEPTH,
    JSON_DIGITS,
    JSON_INT_READ,
    fsync_dir,
    link_below,
    make_below,
    open_regular,
    parse_json,
    remove_tree,
)
from accel._locks import locked
from accel.config.views import StoreSettings
from accel.errors import (
    AccelError,
    IntegrityError,
    PayloadMissing,
    StorageError,
    UsageError,
    storage_error,
    write_failed,
)
from accel.identity import ensure
from accel.layout import CACHE_LOCK, CACHE_META, ENTRY_SUFFIX, Layout, dispose, make_owned_dir
from accel.store.entry import (
    PAYLOAD_NAMES,
    CacheMeta,
    MetaMissing,
    Stamp,
    check_key,
    detach_entry,
    entry_folders,
    file_name_ok,
    key_of,
    made_by_accel,
    prune,
    read_cache_meta,
    strip_entry,
    write_cache_meta,
)
from accel.store.hashing import FileDigest, digest_bytes, hash_file
from accel.store.kv import json_problem
from accel.store.tensorfile import load_tensor_file, save_tensor_file, tensor_tree_problem

__all__ = ["Cache", "CacheEntryInfo"]

META = CACHE_META
_MISSING: Any = object()
# Re-reads of meta.json when versions keep being replaced under a reader.
_RETRIES = 1000
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CacheEntryInfo:
    key: str
    path: Path
    kind: str
    size: int
    created: float
    last_used: float
    run_id: str | None


def _info(path: Path, meta: CacheMeta) -> CacheEntryInfo:
    return CacheEntryInfo(
        meta.key, path, meta.kind, meta.size, meta.created, meta.last_used, meta.run_id
    )


def _kind_of(obj: Any) -> str:
    if isinstance(obj, os.PathLike):
        return "file"
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return "bytes"
    _require_readable(obj)
    if json_problem(obj, levels=JSON_DEPTH) is None:  # a payload of its own: 64 levels
        return "json"
    problem = tensor_tree_problem(obj, "the value")
    if problem is None:
        return "tensors"
    raise UsageError(
        f"cannot cache {problem}: store tensors, dicts/lists of tensors and plain values, "
        "bytes or a pathlib.Path to a file (convert other objects first)"
    )


class Cache:
    """Artifacts by key under ``cache/entries/``; safe across processes."""

    def __init__(self, layout: Layout, settings: StoreSettings) -> None:
        self.layout = layout
        self.settings = settings
        self.root = layout.entries_dir
        self.lock_path = layout.lock(CACHE_LOCK)

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    # -- paths --------------------------------------------------------------------------

    def entry_dir(self, key: str) -> Path:
        """The folder of ``key`` (validated: it can only lie inside the cache)."""
        return self.root / (check_key(key) + ENTRY_SUFFIX)

    def _no_link(self, path: Path, error: type[AccelError] = IntegrityError) -> None:
        """``error`` when a folder on the way to ``path`` is a link: a get through it would
        read, a put write (and its prune delete) wherever the link leads."""
        link = link_below(self.root, path)
        if link is not None:
            raise error(f"{link} is a symbolic link, which could lead outside the cache; remove it")

    def _make_namespace(self, entry: Path) -> None:
        # A folder at a time, never through a link: ``mkdir -p`` would follow a linked
        # namespace and make folders wherever it leads.
        self.root.mkdir(parents=True, exist_ok=True)
        if make_below(self.root, entry.parent) is not None:
            self._no_link(entry.parent, UsageError)  # says which link

    def _meta(self, entry: Path, key: str) -> CacheMeta | None:
        """The committed metadata, None when there is no entry; IntegrityError if damaged
        or reached through a link."""
        self._no_link(entry)
        try:
            return read_cache_meta(entry, key)
        except MetaMissing:
            return None

    # -- reading (no lock: payloads never change in place) ------------------------------

    def __contains__(self, key: object) -> bool:
        return self.info(key) is not None  # type: ignore[arg-type]

    def info(self, key: str) -> CacheEntryInfo | None:
        """The entry's record; None when absent or unreadable (see :meth:`get`)."""
        entry = self.entry_dir(key)
        try:
            meta = self._meta(entry, key)
        except IntegrityError:
            return None
        return None if meta is None else _info(entry, meta)

    def get(self, key: str, default: Any = None, *, map_location: Any = "cpu") -> Any:
        """The cached value, verified; ``default`` when absent. Updates last use.

        IntegrityError when the entry is damaged: delete it and compute the value again.
        """
        entry = self.entry_dir(key)
        found = self._read(entry, key, lambda meta: self._load(entry, meta, map_location))
        if found is _MISSING:
            return default
        meta, (value, stamp) = found
        self._touch(entry, meta, stamp)
        return value

    def path(self, key: str) -> Path | None:
        """The cached file of a file artifact (None when absent), verified. Updates last use.

        The file is hashed in full unless it is provably unchanged since it was last
        verified (same inode, size, mtime and ctime, recorded at least 2 s after its last
        change). The path stays valid until the key is deleted, and for a minute after
        it is replaced.
        """
        entry = self.entry_dir(key)

        def file_of(meta: CacheMeta) -> tuple[Path, Stamp | None]:
            if meta.kind != "file":
                raise UsageError(f"cache key {key!r} holds a {meta.kind} value, not a file")
            return self._load(entry, meta, "cpu")

        found = self._read(entry, key, file_of)
        if found is _MISSING:
            return None
        meta, (path, stamp) = found
        self._touch(entry, meta, stamp)
        return path  # type: ignore[no-any-return]

    def _read(self, entry: Path, key: str, use: Callable[[CacheMeta], Any]) -> Any:
        """``(meta, use(meta))`` of the committed entry, or _MISSING when there is none.

        A payload that vanished was replaced (or deleted) after meta.json was read: read
        meta.json again rather than report a miss or a corruption that is not there.
        """
        for _ in range(_RETRIES):
            meta = self._meta(entry, key)
            if meta is None:
                return _MISSING
            try:
                return meta, use(meta)
            except (FileNotFoundError, PayloadMissing):
                again = self._meta(entry, key)
                if again is None:
                    return _MISSING
                if again.payload == meta.payload:
                    raise IntegrityError(
                        f"{entry / meta.payload} is missing; delete the entry and recompute"
                    ) from None
        raise IntegrityError(f"{entry} kept changing while it was read; retry")

    def _load(self, entry: Path, meta: CacheMeta, map_location: Any) -> tuple[Any, Stamp | None]:
        """The value and, for a file verified just now, its new stamp."""
        payload = entry / meta.payload
        self._no_link(payload.parent)  # its version folder too
        if meta.kind == "tensors":
            return load_tensor_file(payload, meta.digest, map_location), None
        if meta.kind == "file":
            return payload, verify_file(payload, meta)
        data = read_plain(payload, meta.digest)
        # Checksummed, yet maybe pulled: bounded in depth (any number: the values are the user's).
        value = parse_json(data, payload, strict=False) if meta.kind == "json" else data
        return value, None

    def _touch(self, entry: Path, read: CacheMeta, stamp: Stamp | None) -> None:
        try:
            self._record_use(entry, read, stamp)
        except OSError as exc:
            # Last use is bookkeeping: a read-only or full disk must not fail a read that
            # worked (the entry just keeps its older last use).
            if not isinstance(storage_error(exc, "record the last use of", entry), StorageError):
                raise

    def _record_use(self, entry: Path, read: CacheMeta, stamp: Stamp | None) -> None:
        # Under the lock so that a concurrent delete or put cannot be undone by it.
        with locked(self.lock_path, self.settings.lock_timeout, poll_interval=0.001):
            try:
                meta = self._meta(entry, read.key)
            except IntegrityError:
                return
            if meta is None or meta.payload != read.payload:
                return
            touched = meta.touched(time.time(), os.environ.get("ACCEL_RUN_ID"), stamp)
            write_cache_meta(entry, touched, durable=False)

    # -- writing ------------------------------------------------------------------------

    def put(self, key: str, obj: Any) -> CacheEntryInfo:
        """Store ``obj`` under ``key``, replacing what was there."""
        entry = self.entry_dir(key)
        kind = _kind_of(obj)
        ensure(self.layout)
        version = os.urandom(16).hex()
        stage = self.layout.tmp_dir / f"cache-{version}"
        try:
            make_owned_dir(stage, parents=True)
            meta = self._stage(stage, f"v{version[:16]}", key, kind, obj)
            self._make_namespace(entry)
            with locked(self.lock_path, self.settings.lock_timeout, poll_interval=0.001):
                self._commit(entry, stage, meta)
        except OSError as exc:  # a read-only or full disk, a file where a folder belongs
            where = self.layout.data
            raise storage_error(exc, f"write the cache entry {key!r} in", where) from None
        finally:
            remove_tree(stage)  # a no-op once committed: the folder was moved
        return _info(entry, meta)

    def _stage(self, stage: Path, version: str, key: str, kind: str, obj: Any) -> CacheMeta:
        name = PAYLOAD_NAMES.get(kind) or file_name(obj)
        digest = write_payload(stage / name, kind, obj)
        fsync_dir(stage)
        now = time.time()
        run_id = os.environ.get("ACCEL_RUN_ID")
        payload = f"{version}/{name}"
        return CacheMeta(key, kind, payload, digest.size, digest.checksum, now, now, run_id)

    def _commit(self, entry: Path, stage: Path, meta: CacheMeta) -> None:
        """Under the lock: version in, meta.json replaced, old versions out."""
        self._no_link(entry, UsageError)
        if os.path.lexists(entry) and not made_by_accel(entry, meta.key):
            raise UsageError(
                f"{entry} is not a cache entry accel made; move it away to use this key"
            )
        if not os.path.lexists(entry):
            make_owned_dir(entry)
        _faults.point("cache.put.entry-ready")
        os.rename(stage, entry / meta.payload.split("/")[0])
        fsync_dir(entry)  # the version is durable before meta.json points at it
        _faults.point("cache.put.version-in")
        old = self._meta_or_none(entry, meta.key)
        write_cache_meta(entry, meta)
        _faults.point("cache.put.meta-written")
        prune(entry, meta, old)

    def _meta_or_none(self, entry: Path, key: str) -> CacheMeta | None:
        try:
            return read_cache_meta(entry, key)
        except IntegrityError:
            return None

    def delete(self, key: str, *, force: bool = False) -> bool:
        """Remove ``key``'s entry; False when there was none.

        Only a folder accel made goes (a link or a stranger's folder stays, False). Files
        in it that accel did not make stay, with the folder, unless ``force``: the entry
        is gone (its record first), the folder holds only those.
        """
        entry = self.entry_dir(key)
        with locked(self.lock_path, self.settings.lock_timeout, poll_interval=0.001):
            committed = self._meta_or_none(entry, key) is not None
            if not force and strip_entry(entry, self.root, key):
                return committed
            doomed = detach_entry(entry, self.root, key)
        if doomed is None:
            return False
        _faults.point("cache.delete.detached")
        dispose(doomed)
        return committed

    # -- scanning (for accel clean / status) --------------------------------------------

    def entry_folders(self) -> Iterator[Path]:
        """Every ``*.entry`` folder, not following links (committed or not)."""
        return entry_folders(self.root)

    def entries(self) -> list[CacheEntryInfo]:
        """Every committed entry, sorted by key; damaged ones are left out (see debris)."""
        out = []
        for entry in self.entry_folders():
            meta = self._meta_or_none(entry, key_of(entry, self.root))
            if meta is not None:
                out.append(_info(entry, meta))
        return sorted(out, key=lambda e: e.key)

    def debris(self) -> list[Path]:
        """Entry folders without a readable ``meta.json``: interrupted puts, damage."""
        found = self.entry_folders()
        return sorted(e for e in found if self._meta_or_none(e, key_of(e, self.root)) is None)

    def clean(self, *args: Any, **kwargs: Any) -> list[CacheEntryInfo]:
        """Removed: a second rule for what a clean may delete (it took live runs' entries)."""
        raise UsageError(
            "ws.cache.clean() was removed: use accel.clean.clean_cache(ws, older_than=...), "
            "the rule of `accel clean --only cache` (it keeps a live run's entries)"
        )

    # -- memoize ------------------------------------------------------------------------

    def memoize(
        self, fn: F | None = None, *, version: str | int = 0, name: str | None = None
    ) -> Any:
        """Decorator: cache ``fn``'s result by its identity, arguments and ``version``."""

        def decorate(func: F) -> F:
            ident = name or f"{func.__module__}.{func.__qualname__}"
            prefix = f"memoize/{safe_segment(ident)}/v{safe_segment(str(version))}"
            signature = inspect.signature(func)

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                key = f"{prefix}/{args_digest(bound.arguments)}"
                found = self.get(key, _MISSING)
                if found is not _MISSING:
                    return found
                result = func(*args, **kwargs)
                self.put(key, result)
                return result

            wrapper.cache_key_prefix = prefix  # type: ignore[attr-defined]
            return wrapper  # type: ignore[return-value]

        return decorate(fn) if fn is not None else decorate


# -- payload files -----------------------------------------------------------------------

RACY_SECONDS = 2.0


def file_name(obj: Any) -> str:
    name = Path(os.fspath(obj)).name
    ok = file_name_ok(name) and not name.startswith(".") and name not in PAYLOAD_NAMES.values()
    return name if ok else "file"


def write_payload(payload: Path, kind: str, obj: Any) -> FileDigest:
    if kind == "tensors":
        return save_tensor_file(obj, payload)
    if kind == "file":
        return _copy_file(Path(os.fspath(obj)), payload)
    data = json.dumps(obj, sort_keys=True).encode("utf-8") if kind == "json" else bytes(obj)
    try:
        with open(payload, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise write_failed(payload, exc) from exc
    return FileDigest(len(data), digest_bytes(data))


def _copy_file(source: Path, payload: Path) -> FileDigest:
    if not source.is_file():
        raise UsageError(f"cannot cache {source}: it is not a file")
    try:
        shutil.copyfile(source, payload)
        fd = os.open(payload, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise write_failed(payload, exc) from exc
    checksum, size = hash_file(payload)
    return FileDigest(size, checksum)


def read_plain(payload: Path, digest: FileDigest) -> bytes:
    """The bytes of a JSON or bytes payload, verified; never through a link."""
    with os.fdopen(open_regular(payload), "rb") as fh:  # never a link, FIFO or device
        data = fh.read(digest.size + 1)
    if len(data) != digest.size or digest_bytes(data) != digest.checksum:
        raise IntegrityError(f"{payload} fails its checksum; delete the entry and recompute")
    return data


def _unreadable(payload: Path, exc: OSError) -> IntegrityError:
    return IntegrityError(f"{payload} cannot be read ({exc.strerror}); delete the entry")


def verify_file(payload: Path, meta: CacheMeta) -> Stamp | None:
    """Check a file payload against its checksum unless provably unchanged since the
    last check; its new stamp when it was hashed (None when it may still change)."""
    try:
        st = os.lstat(payload)
    except FileNotFoundError:
        raise
    if not stat.S_ISREG(st.st_mode):
        raise IntegrityError(f"{payload} is not a regular file; delete the entry")
    stamp: Stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if meta.verified == stamp:
        return None
    try:
        checksum, size = hash_file(payload)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _unreadable(payload, exc) from None
    if (size, checksum) != (meta.size, meta.checksum):
        raise IntegrityError(f"{payload} fails its checksum; delete the entry and recompute")
    settled = time.time() - max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 >= RACY_SECONDS
    return stamp if settled else None


# -- values: only what every reader takes back ---------------------------------------------

_CONTAINERS = (list, tuple, set, frozenset, dict)


def _require_readable(obj: Any) -> None:
    """UsageError before anything is written for a value no reader would take back."""
    for node in tree_nodes(obj, "cannot cache"):
        if isinstance(node, int) and abs(node) >= JSON_INT_READ:
            raise UsageError(
                f"cannot cache an int of more than {JSON_DIGITS} digits: JSON readers refuse "
                "it (store hex(n) or its bytes instead)"
            )


def tree_nodes(value: Any, what: str) -> Iterator[Any]:
    """``value`` and everything in it (items of lists, tuples and sets; keys and values of
    dicts), without recursion. UsageError (its text begins with ``what``) for a value
    nested deeper than the readers read (``JSON_DEPTH``), or one that contains itself."""
    yield value
    stack: list[tuple[Any, tuple[int, ...]]] = []
    if isinstance(value, _CONTAINERS):
        stack.append((value, ()))
    while stack:
        node, above = stack.pop()  # ``above``: the containers it is in, outermost first
        above = (*above, id(node))
        if len(above) > JSON_DEPTH:
            cycle = len(set(above)) < len(above)
            deep = f"nested too deep (values are nested at most {JSON_DEPTH} levels)"
            why = "that contains itself" if cycle else deep
            raise UsageError(f"{what} a value {why}")
        for item in [*node.keys(), *node.values()] if isinstance(node, dict) else node:
            yield item
            if isinstance(item, _CONTAINERS):
                stack.append((item, above))


# -- memoize: a function's identity and a digest of its arguments ------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_segment(text: str) -> str:
    return _UNSAFE.sub("_", text).lstrip(".")[:100] or "_"


def args_digest(arguments: dict[str, Any]) -> str:
    """A digest of ``arguments`` that two different calls never share.

    JSON values with str keys keep the text they always had, so the results cached for
    them stay hits. Arguments that JSON would blur or cannot write, a dict key of another
    type (json writes ``{1: x}`` as ``{"1": x}``) or an int over its digit limit, are
    written typed instead, in a text that no JSON text begins like.
    """
    import hashlib  # here: OpenSSL's, 4 ms of every command's start-up

    nodes = (n for v in arguments.values() for n in tree_nodes(v, "memoize cannot key on"))
    blurred = [n for n in nodes if _blurred(n)]  # all of them: every one is checked
    if blurred:
        text = "typed " + json.dumps(_typed(arguments))
    else:
        text = json.dumps(arguments, sort_keys=True, default=_canonical)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _blurred(node: Any) -> bool:
    if isinstance(node, dict):
        return not all(isinstance(key, str) for key in node)
    return isinstance(node, int) and abs(node) >= JSON_INT_READ


def _typed(value: Any) -> Any:
    """``value`` as JSON that keeps every type: ``[type, value]``, dict items and set
    members in the order of their text. Nested at most ``JSON_DEPTH`` deep (checked)."""
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", hex(value)]  # hex: no digit limit
    if isinstance(value, float):
        return ["float", value.hex()]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, dict):
        return ["dict", sorted(([_typed(k), _typed(v)] for k, v in value.items()), key=json.dumps)]
    if isinstance(value, (set, frozenset)):
        return ["set", sorted(map(_typed, value), key=json.dumps)]
    if isinstance(value, (list, tuple)):
        return ["tuple" if isinstance(value, tuple) else "list", [_typed(v) for v in value]]
    return _canonical(value)  # {"path": ...}: an object, never one of the lists above


def _canonical(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value, key=repr) if not isinstance(value, tuple) else list(value)
    if isinstance(value, os.PathLike):
        return {"path": os.fspath(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": digest_bytes(bytes(value))}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return {"tensor": [str(value.dtype), list(value.shape), digest_bytes(data)]}
    raise UsageError(
        f"memoize cannot key on an argument of type {type(value).__name__}; pass JSON "
        "values, tensors, bytes or paths (or give the function a `name` and hash it yourself)"
    )
