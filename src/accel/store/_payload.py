"""Cache payload files: written with a checksum and fsync, read back only verified.

A JSON, bytes or tensor payload is read whole and checked against its checksum every
time. A file payload is handed out as a path, so it is checked before: hashed in full
unless it is provably unchanged since it last matched (same device, inode, size, mtime
and ctime, recorded at least ``RACY_SECONDS`` after its last change: filesystem
timestamps are coarse, and a write within the same tick could keep them). Links are
never followed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from accel._fs import JSON_DEPTH, json_depth, open_regular
from accel.errors import IntegrityError, UsageError, write_failed
from accel.store.entry import PAYLOAD_NAMES, CacheMeta, Stamp, file_name_ok
from accel.store.hashing import FileDigest, digest_bytes, hash_file
from accel.store.tensorfile import save_tensor_file

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
    if kind == "json" and json_depth(data) > JSON_DEPTH:  # what get would refuse: never put
        raise UsageError(f"the cache holds JSON values nested at most {JSON_DEPTH} levels deep")
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
