"""How much of a file the page cache holds (Linux ``mincore``), for the writer tests."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from pathlib import Path

import pytest

PAGE = mmap.PAGESIZE


def _filesystem(path: Path) -> str:
    best = ("", "")
    with open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            _, mount, fstype, *_ = line.split()
            if str(path.resolve()).startswith(mount) and len(mount) >= len(best[0]):
                best = (mount, fstype)
    return best[1]


def needs_page_cache_control(path: Path) -> None:
    """Skip unless ``path`` is on Linux storage whose cached pages can be dropped
    (tmpfs and ramfs pages *are* the data)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("write-behind and drop-behind are Linux-only")
    if _filesystem(path) in ("tmpfs", "ramfs", "overlay"):
        pytest.skip(f"{path} is on a memory filesystem: its pages cannot leave the cache")


def resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache now (mapping it reads nothing in)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    with open(path, "rb") as fh:
        mapped = mmap.mmap(
            fh.fileno(), size, prot=mmap.PROT_READ | mmap.PROT_WRITE, flags=mmap.MAP_PRIVATE
        )
    try:
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(mapped)
        try:
            if libc.mincore(ctypes.addressof(anchor), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
        finally:
            del anchor
        return sum(v & 1 for v in vec) * PAGE
    finally:
        mapped.close()
