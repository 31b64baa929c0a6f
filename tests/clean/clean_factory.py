"""Build workspace state on disk in the formats of docs/layout.md, at any recorded time."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from accel.layout import make_owned_dir
from accel.store.entry import CacheMeta, write_cache_meta
from accel.store.hashing import FileDigest, digest_bytes
from accel.store.manifest import Manifest, write_manifest
from accel.workspace import Workspace

DAY = 86400.0


def workspace(project: Path) -> Workspace:
    return Workspace(project / ".accelerate").ensure()


def entry(
    ws: Workspace,
    key: str,
    *,
    size: int = 100,
    created: float,
    last_used: float | None = None,
    run_id: str | None = None,
    mtime: float | None = None,
) -> Path:
    """A committed cache entry, written by the one writer of the format."""
    folder = ws.cache_dir / "entries" / f"{key}.entry"
    folder.parent.mkdir(parents=True, exist_ok=True)
    make_owned_dir(folder)
    (folder / "value.bin").write_bytes(b"x" * size)
    used = created if last_used is None else last_used
    digest = digest_bytes(b"x" * size)
    write_cache_meta(
        folder, CacheMeta(key, "bytes", "value.bin", size, digest, created, used, run_id)
    )
    if mtime is not None:
        age_tree(folder, mtime)
    return folder


def checkpoint(
    ws: Workspace,
    series: str,
    step: int,
    *,
    created: float,
    size: int = 100,
    run_id: str | None = None,
    manifest: bool = True,
) -> Path:
    """A committed checkpoint (``manifest=False``: one whose save never finished)."""
    folder = ws.checkpoints_dir / series / f"step-{step:012d}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    make_owned_dir(folder)
    (folder / "state.tensors").write_bytes(b"m" * size)
    if manifest:
        digest = FileDigest(size, digest_bytes(b"m" * size))
        doc = Manifest(series, step, created, None, run_id, 1, {"state.tensors": digest})
        write_manifest(folder, doc)
    return folder


def run(
    ws: Workspace, run_id: str, *, status: str = "succeeded", started: str, ended: str | None = None
) -> Path:
    folder = ws.runs_dir / run_id
    folder.mkdir(parents=True)
    record = {"id": run_id, "status": status, "started_at": started, "ended_at": ended}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "rank-0.log").write_text("hello\n")
    return folder


def age_tree(path: Path, when: float) -> None:
    """Set the mtime of ``path`` and everything under it (links untouched)."""
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when), follow_symlinks=False)


def tree_digest(root: Path) -> str:
    """Paths, kinds, modes, sizes, mtimes and contents of everything under ``root``."""
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            st = os.lstat(path)
            h.update(f"{path}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}\n".encode())
            if os.path.isfile(path) and not os.path.islink(path):
                h.update(Path(path).read_bytes())
            elif os.path.islink(path):
                h.update(os.readlink(path).encode())
    return h.hexdigest()
