"""The cache: artifacts by key (tensors, plain values, bytes, files).

Each entry is a folder ``cache/entries/<key>.entry/`` holding its payload and
``meta.json``. The payload is staged in ``tmp/``, ``meta.json`` is written last into
the staged folder, and the folder is renamed into place under ``locks/cache.lock``:
an entry is visible whole or not at all. Deleting removes ``meta.json`` first.

``meta.json``: ``{"format": 1, "key", "kind", "payload", "size", "checksum",
"created", "last_used", "run_id"}``; times are ``time.time()`` seconds recorded in
the file (never mtimes or atime); ``last_used`` and ``run_id`` change on every get.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from accel.errors import UsageError
from accel.fsutil import atomic_write_json, fsync_dir, read_json
from accel.locking import locked
from accel.store._hashing import digest_bytes, hash_file
from accel.store._keys import ENTRY_SUFFIX, check_key
from accel.store._serial import (
    FileDigest,
    load_tensor_file,
    save_tensor_file,
    verify_size,
    write_error,
)
from accel.store._values import json_problem, tensor_tree_problem
from accel.units import parse_duration

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["Cache", "CacheEntryInfo"]

META = "meta.json"
FORMAT = 1
_MISSING: Any = object()
_PAYLOADS = {"json": "value.json", "bytes": "data.bin", "tensors": "value.tensors"}
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


def _info(path: Path, meta: dict[str, Any]) -> CacheEntryInfo:
    return CacheEntryInfo(
        key=str(meta["key"]),
        path=path,
        kind=str(meta["kind"]),
        size=int(meta["size"]),
        created=float(meta["created"]),
        last_used=float(meta["last_used"]),
        run_id=None if meta.get("run_id") is None else str(meta["run_id"]),
    )


def _kind_of(obj: Any) -> str:
    if isinstance(obj, os.PathLike):
        return "file"
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return "bytes"
    if json_problem(obj) is None:
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

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.root = ws.cache_dir / "entries"
        self.lock_path = ws.lock_path("cache")

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    # -- paths --------------------------------------------------------------------------

    def entry_dir(self, key: str) -> Path:
        """The folder of ``key`` (validated: it can only lie inside the cache)."""
        return self.root / (check_key(key) + ENTRY_SUFFIX)

    def _inside(self, path: Path) -> Path:
        # A symlinked namespace folder must not lead a write outside the cache.
        real_root = os.path.realpath(self.root)
        real = os.path.realpath(path.parent)
        if os.path.commonpath([real_root, real]) != real_root:
            raise UsageError(f"{path.parent} leads outside the cache ({real}); remove that link")
        return path

    def _meta(self, entry: Path) -> dict[str, Any] | None:
        try:
            meta = read_json(entry / META)
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    # -- reading ------------------------------------------------------------------------

    def __contains__(self, key: object) -> bool:
        return self._meta(self.entry_dir(key)) is not None  # type: ignore[arg-type]

    def info(self, key: str) -> CacheEntryInfo | None:
        entry = self.entry_dir(key)
        meta = self._meta(entry)
        return None if meta is None else _info(entry, meta)

    def get(self, key: str, default: Any = None, *, map_location: Any = "cpu") -> Any:
        """The cached value, verified; ``default`` when absent. Updates last use."""
        entry = self.entry_dir(key)
        meta = self._meta(entry)
        if meta is None:
            return default
        value = self._load(entry, meta, map_location)
        self._touch(entry)
        return value

    def path(self, key: str) -> Path | None:
        """The cached file of a file artifact (None when absent). Updates last use."""
        entry = self.entry_dir(key)
        meta = self._meta(entry)
        if meta is None:
            return None
        if meta["kind"] != "file":
            raise UsageError(f"cache key {key!r} holds a {meta['kind']} value, not a file")
        payload = entry / str(meta["payload"])
        verify_size(payload, FileDigest(int(meta["size"]), str(meta["checksum"])))
        self._touch(entry)
        return payload

    def _load(self, entry: Path, meta: dict[str, Any], map_location: Any) -> Any:
        kind = meta["kind"]
        payload = entry / str(meta["payload"])
        digest = FileDigest(int(meta["size"]), str(meta["checksum"]))
        if kind == "tensors":
            return load_tensor_file(payload, digest, map_location)
        if kind == "file":
            return payload
        verify_size(payload, digest)
        data = payload.read_bytes()
        if digest_bytes(data) != digest.checksum:
            from accel.errors import IntegrityError

            raise IntegrityError(f"{payload} fails its checksum; delete the entry and recompute")
        return json.loads(data) if kind == "json" else data

    def _touch(self, entry: Path) -> None:
        # Under the lock so that a concurrent delete (meta.json first) cannot be undone.
        with locked(self.lock_path, self.ws, poll_interval=0.001):
            meta = self._meta(entry)
            if meta is None:
                return
            meta["last_used"] = time.time()
            meta["run_id"] = os.environ.get("ACCEL_RUN_ID")
            atomic_write_json(entry / META, meta, durable=False)

    # -- writing ------------------------------------------------------------------------

    def put(self, key: str, obj: Any) -> CacheEntryInfo:
        """Store ``obj`` under ``key``, replacing what was there."""
        entry = self.entry_dir(key)
        kind = _kind_of(obj)
        self.ws.ensure()
        stage = self.ws.tmp_dir / f"cache-{uuid.uuid4().hex}"
        stage.mkdir(parents=True)
        try:
            meta = self._stage(stage, key, kind, obj)
            entry.parent.mkdir(parents=True, exist_ok=True)
            self._inside(entry)
            with locked(self.lock_path, self.ws, poll_interval=0.001):
                self._remove(entry)
                os.rename(stage, entry)
                fsync_dir(entry.parent)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return _info(entry, meta)

    def _stage(self, stage: Path, key: str, kind: str, obj: Any) -> dict[str, Any]:
        payload_name = _PAYLOADS.get(kind) or _file_name(obj)
        payload = stage / payload_name
        digest = _write_payload(payload, kind, obj)
        now = time.time()
        meta = {
            "format": FORMAT,
            "key": key,
            "kind": kind,
            "payload": payload_name,
            "size": digest.size,
            "checksum": digest.checksum,
            "created": now,
            "last_used": now,
            "run_id": os.environ.get("ACCEL_RUN_ID"),
        }
        atomic_write_json(stage / META, meta)
        return meta

    def delete(self, key: str) -> bool:
        """Remove ``key``'s entry (``meta.json`` first); False when it was not there."""
        entry = self.entry_dir(key)
        with locked(self.lock_path, self.ws, poll_interval=0.001):
            return self._remove(entry)

    def _remove(self, entry: Path) -> bool:
        if not entry.exists():
            return False
        had_meta = True
        try:
            (entry / META).unlink()
            fsync_dir(entry)
        except FileNotFoundError:
            had_meta = False
        shutil.rmtree(entry, ignore_errors=True)
        return had_meta

    # -- scanning (for accel clean / status) --------------------------------------------

    def _walk(self) -> Iterator[Path]:
        """Every ``*.entry`` folder, not following links."""
        stack = [self.root]
        while stack:
            try:
                with os.scandir(stack.pop()) as it:
                    for item in it:
                        if not item.is_dir(follow_symlinks=False):
                            continue
                        if item.name.endswith(ENTRY_SUFFIX):
                            yield Path(item.path)
                        else:
                            stack.append(Path(item.path))
            except OSError:
                continue

    def entries(self) -> list[CacheEntryInfo]:
        """Every committed entry, sorted by key; unreadable ones are skipped (see debris)."""
        out = []
        for entry in self._walk():
            meta = self._meta(entry)
            if meta is not None:
                with contextlib.suppress(KeyError, ValueError, TypeError):
                    out.append(_info(entry, meta))
        return sorted(out, key=lambda e: e.key)

    def debris(self) -> list[Path]:
        """Entry folders without a readable ``meta.json``: torn writes or deletes."""
        return sorted(e for e in self._walk() if self._meta(e) is None)

    def clean(
        self, older_than: float | str | None = None, *, now: float | None = None
    ) -> list[CacheEntryInfo]:
        """Delete entries last used more than ``older_than`` ago (all when None)."""
        seconds = parse_duration(older_than) if isinstance(older_than, str) else older_than
        cutoff = (time.time() if now is None else now) - (seconds or 0.0)
        removed = []
        for info in self.entries():
            if (seconds is None or info.last_used < cutoff) and self.delete(info.key):
                removed.append(info)
        return removed

    # -- memoize ------------------------------------------------------------------------

    def memoize(
        self, fn: F | None = None, *, version: str | int = 0, name: str | None = None
    ) -> Any:
        """Decorator: cache ``fn``'s result by its identity, arguments and ``version``."""

        def decorate(func: F) -> F:
            ident = name or f"{func.__module__}.{func.__qualname__}"
            prefix = f"memoize/{_safe_segment(ident)}/v{_safe_segment(str(version))}"
            signature = inspect.signature(func)

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                key = f"{prefix}/{_args_digest(bound.arguments)}"
                found = self.get(key, _MISSING)
                if found is not _MISSING:
                    return found
                result = func(*args, **kwargs)
                self.put(key, result)
                return result

            wrapper.cache_key_prefix = prefix  # type: ignore[attr-defined]
            return wrapper  # type: ignore[return-value]

        return decorate(fn) if fn is not None else decorate


def _file_name(obj: Any) -> str:
    name = Path(os.fspath(obj)).name
    return name if name and name not in (META, *_PAYLOADS.values()) else "file"


def _write_payload(payload: Path, kind: str, obj: Any) -> FileDigest:
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
        raise write_error(payload, exc) from exc
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
        raise write_error(payload, exc) from exc
    checksum, size = hash_file(payload)
    return FileDigest(size, checksum)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe_segment(text: str) -> str:
    return _UNSAFE.sub("_", text).lstrip(".")[:100] or "_"


def _args_digest(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, sort_keys=True, default=_canonical)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


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
