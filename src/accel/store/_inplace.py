"""Files a writer rewrites in place: the memory tier's slots (:mod:`accel.store.memtier`).

A copy into tmpfs pages that are already there runs at memory speed; a new file's pages
cost four to five times that (docs/benchmarks.md). So a writer keeps each file it wrote
open, and mapped once it rewrites it, and rewrites it where it is, but only a file that
nothing else holds: it takes the file's lock (``flock``, exclusive, without waiting) and
checks that the file's name is its only link. A reader that holds the file's shared lock
(the launcher, persisting it) or another link to it (``slot-keep``) keeps it as it is,
and a new file (a new inode) takes the name.

A new file is written with ``write()``, not through a mapping: a full tmpfs says
``ENOSPC`` there, where a store into a mapped hole would be a ``SIGBUS``; a file that
grows is ``posix_fallocate``d before it is mapped again. Mappings are not inherited by a
forked process (``MADV_DONTFORK``), and a forked process (a DataLoader's worker) closes
the descriptors it inherited: neither keeps a file the writer replaces in memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import weakref
from pathlib import Path
from typing import Any

from accel.store.tensorfile import in_memory_pieces, write_pieces

__all__ = ["InPlaceFiles"]


class InPlaceFiles:
    """The files one writer wrote, by path."""

    def __init__(self) -> None:
        self._files: dict[Path, _Mapped] = {}
        _owners.add(self)

    def write(self, path: Path, tree: Any) -> int:
        """``tree``'s file at ``path`` (the bytes a checkpoint's file of it holds): in
        place when this writer wrote the file there and nothing else holds it, else a new
        file. Its size."""
        import numpy as np  # a dependency: its copies leave the GIL to the training thread

        with in_memory_pieces(tree) as (size, pieces):
            mapped = self._reuse(path, size)
            if mapped is None:
                # A new file is written, not mapped: write() fills new tmpfs pages at
                # about half the cost of faulting them in through a mapping, and a full
                # tmpfs says ENOSPC instead of SIGBUS. It is mapped when it is reused.
                mapped = self._create(path)
                try:
                    mapped.size = write_pieces(mapped.fd, pieces)
                finally:
                    fcntl.flock(mapped.fd, fcntl.LOCK_UN)
                return mapped.size
            try:
                target = np.frombuffer(mapped.map(), dtype=np.uint8)
                at = 0
                for piece in pieces:
                    end = at + piece.nbytes
                    np.copyto(target[at:end], np.frombuffer(piece, dtype=np.uint8))
                    at = end
                del target
                assert at == size, (at, size)
            finally:
                fcntl.flock(mapped.fd, fcntl.LOCK_UN)
        return size

    def _reuse(self, path: Path, size: int) -> _Mapped | None:
        """The file at ``path``, locked, at ``size`` bytes, when this writer wrote it and
        nothing else holds it: no reader's lock, no other link."""
        mapped = self._files.get(path)
        if mapped is None:
            return None
        try:
            if not self.holds(path):  # not the file it wrote there, or slot-keep links it
                raise FileExistsError(path)
            fcntl.flock(mapped.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the launcher reads it
        except OSError:
            self.drop(path)
            return None
        if size != mapped.size:
            try:
                if size > mapped.size:  # allocated now: no SIGBUS on a full tmpfs later
                    os.posix_fallocate(mapped.fd, mapped.size, size - mapped.size)
                else:
                    os.ftruncate(mapped.fd, size)
                mapped.unmap()
                mapped.size = size
            except BaseException:
                self.drop(path)
                raise
        return mapped

    def holds(self, path: Path) -> bool:
        """Whether a write of ``path`` rewrites the file in place (unless a reader locks
        it meanwhile): the file this writer wrote is still there, with no other link."""
        mapped = self._files.get(path)
        if mapped is None:
            return False
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == mapped.ino
            return same and os.fstat(mapped.fd).st_nlink == 1
        except OSError:
            return False

    def _create(self, path: Path) -> _Mapped:
        """A new, empty file at ``path``, locked."""
        self.drop(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a reader that opened it keeps it whole
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # new: nobody else holds it
            mapped = _Mapped(fd, os.fstat(fd).st_ino)
        except BaseException:
            os.close(fd)
            raise
        self._files[path] = mapped
        return mapped

    def drop(self, path: Path) -> None:
        """Forget the file at ``path``: it is written as a new file next time."""
        mapped = self._files.pop(path, None)
        if mapped is not None:
            mapped.close()

    def close(self) -> None:
        """Let go of every file (they stay where they are)."""
        for path in list(self._files):
            self.drop(path)

    def _forget_in_child(self) -> None:
        """In a process forked from the writer's (a DataLoader's): let go of the parent's
        files, which would otherwise stay in memory until that process ends, whatever
        the parent replaces. Their locks are the parent's: never unlocked here."""
        for mapped in self._files.values():
            with contextlib.suppress(OSError):
                mapped.unmap()
            with contextlib.suppress(OSError):
                os.close(mapped.fd)
        self._files.clear()


class _Mapped:
    """A slot's file a writer wrote, kept open (and mapped once reused) to be rewritten in
    place. Every byte of its ``size`` is allocated: written, or ``posix_fallocate``d."""

    def __init__(self, fd: int, ino: int) -> None:
        self.fd, self.ino, self.size = fd, ino, 0
        self.mm: mmap.mmap | None = None

    def map(self) -> mmap.mmap:
        """The file's bytes, shared, read in at once (faulting them in a page at a time
        cost twice the copy), and not inherited by a process forked from here."""
        if self.mm is None:
            populate = getattr(mmap, "MAP_POPULATE", 0)
            self.mm = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED | populate)
            with contextlib.suppress(AttributeError, OSError):
                self.mm.madvise(mmap.MADV_DONTFORK)
        return self.mm

    def unmap(self) -> None:
        mm, self.mm = self.mm, None
        if mm is not None:
            with contextlib.suppress(BufferError, ValueError):  # a view alive: goes with it
                mm.close()

    def close(self) -> None:
        self.unmap()
        os.close(self.fd)  # and its lock


_owners: weakref.WeakSet[InPlaceFiles] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for files in list(_owners):
        files._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
