"""Atomic file writes and small filesystem helpers.

Every file accel writes goes through :func:`atomic_write`: a temporary file in the
same folder, fsync, ``os.replace``, then fsync of the folder so the rename itself
survives a power loss. Nothing is ever rewritten in place.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import math
import mmap
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO, NamedTuple

from accel import _faults
from accel.errors import DamagedFile, storage_error, unreadable

TMP_PREFIX = ".accel-tmp-"
# Run records and logs may hold user data (commands, messages, what a script printed):
# never readable by other users, whatever the umask.
PRIVATE_MODE = 0o640


def temp_beside(path: Path) -> Path:
    """A new name beside ``path`` for a file written and then renamed into place: the
    form :func:`atomic_open`'s temp files have (``.accel-tmp-`` and 8 characters), so
    that ``accel clean`` knows one a killed writer left as its own."""
    return path.parent / f"{TMP_PREFIX}{os.urandom(4).hex()}"


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def file_mode(mode: int = 0o666) -> int:
    """``mode`` as ``open()`` would create it (less the umask)."""
    return mode & ~_umask()


def open_private_append(path: Path) -> int:
    """A descriptor appending to ``path``, created :data:`PRIVATE_MODE`, never via a link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, flags, PRIVATE_MODE)
    except OSError as exc:
        raise storage_error(exc, "write", path) from None


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Windows and some filesystems cannot open folders.
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(
    path: Path, mode: str = "wb", *, durable: bool = True, perms: int = 0o666
) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path``; on clean exit it replaces ``path`` atomically.

    ``perms``: the file's mode before the umask (:data:`PRIVATE_MODE` for user data).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
    except OSError as exc:
        raise storage_error(exc, "write", path) from None
    try:
        os.fchmod(fd, file_mode(perms))  # mkstemp made it 0600
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise storage_error(exc, "write", path) from None
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write(
    path: Path, data: bytes | str, *, durable: bool = True, perms: int = 0o666
) -> None:
    """Write ``data`` to ``path`` so readers see the old or the new file, never a mix."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_open(path, "wb", durable=durable, perms=perms) as fh:
        fh.write(payload)


def atomic_write_json(path: Path, obj: Any, *, durable: bool = True, perms: int = 0o666) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True) + "\n"
    atomic_write(path, text, durable=durable, perms=perms)


# -- reading what accel wrote, trusting none of it -------------------------------------------

# No record of accel's nests deeper (a manifest: 3 levels; a run record: under 10). Checked
# before json recurses, so a hostile file is refused in one line, never a RecursionError.
JSON_DEPTH = 64
# The widest integer any record holds (sizes, steps, pids): an int64.
JSON_INT_MAX = 2**63 - 1
# The widest integer a user's value may hold: json reads at most this many digits in a
# process with Python's default limit, whatever limit the writing process set.
JSON_DIGITS = getattr(sys.int_info, "default_max_str_digits", 4300)
JSON_INT_READ = 10**JSON_DIGITS  # the first integer too wide to read back
_MAX_JSON_BYTES = 64 << 20
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO opens at once instead of waiting for a writer
    | getattr(os, "O_CLOEXEC", 0)
)
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
    stat.S_IFLNK: "a symbolic link",
}


def open_regular(path: Path | str, *, follow: bool = False, size: int | None = None) -> int:
    """A descriptor reading the regular file at ``path``, never blocking on opening it.

    :class:`DamagedFile` for anything else (a FIFO, a device, a folder, a link unless
    ``follow``) and, when ``size`` is given (the size its record says), for a file of
    another size. ``FileNotFoundError`` when nothing is there. Read from this descriptor
    only: it is the file that was checked.
    """
    flags = _READ_FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DamagedFile(path, "is a symbolic link, which accel does not follow") from None
        raise unreadable(path, exc) from None
    try:
        st = os.fstat(fd)
        require_regular(st, path)
        if size is not None and st.st_size != size:
            raise DamagedFile(path, f"has {st.st_size} bytes, its record says {size}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def require_regular(st: os.stat_result, path: object) -> None:
    """:class:`DamagedFile` unless ``st`` (an ``fstat`` or ``lstat``) is a regular file's."""
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "a special file")
        raise DamagedFile(path, f"is {kind}, not a regular file")


def open_regular_append(
    path: Path | str, *, readable: bool = False, mode: int = PRIVATE_MODE
) -> int:
    """A descriptor appending to the regular file at ``path`` (created ``mode`` when
    missing), read-write when ``readable``: never through a link, never waiting on a FIFO
    put in its place (``O_NONBLOCK``: it opens at once, or fails with no reader), and
    :class:`DamagedFile` for anything but a regular file; OSError where it cannot be
    opened (``storage_error``'s line)."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | _APPEND_FLAGS
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        raise storage_error(exc, "write", path) from None
    try:
        require_regular(os.fstat(fd), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


_APPEND_FLAGS = (
    os.O_APPEND
    | os.O_CREAT
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def read_regular(path: Path | str, limit: int, *, follow: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_regular`), at most
    ``limit`` of them: :class:`DamagedFile` for a larger one."""
    fd = open_regular(path, follow=follow)
    try:
        if os.fstat(fd).st_size > limit:
            raise DamagedFile(path, f"is larger than any such file of accel's ({limit} bytes)")
        chunks = []
        left = limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise unreadable(path, exc) from None
    finally:
        os.close(fd)
    if left <= 0:  # it grew while being read
        raise DamagedFile(path, f"is larger than any such file of accel's ({limit} bytes)")
    return b"".join(chunks)


def read_from(path: Path | str, offset: int = 0, *, follow: bool = False) -> bytes:
    """What the regular file at ``path`` holds from ``offset`` on: a log or a stream that
    accel appends to, read as far as it is now. :class:`DamagedFile` (a ValueError) for a
    FIFO, a device or a link; an ``OSError`` when it cannot be read."""
    with os.fdopen(open_regular(path, follow=follow), "rb") as fh:
        if offset:
            fh.seek(offset)
        return fh.read()


READ_CHUNK = 1 << 20


def read_chunks(
    path: Path | str, offset: int = 0, *, chunk: int = READ_CHUNK, follow: bool = False
) -> Iterator[bytes]:
    """:func:`read_from` a chunk at a time: what the file holds from ``offset`` to its size
    when opened (what a writer appends meanwhile is left for the next read, so a file that
    grows without end is never read without end). Opened now: errors as :func:`read_from`
    raises them, and an ``OSError`` where a read fails."""
    fd = open_regular(path, follow=follow)
    try:
        end = os.fstat(fd).st_size
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return _chunks(fd, end - offset, chunk)


def _chunks(fd: int, left: int, chunk: int) -> Iterator[bytes]:
    try:
        while left > 0 and (data := os.read(fd, min(left, chunk))):
            left -= len(data)
            yield data
    finally:
        os.close(fd)


def tail_offset(
    path: Path | str, lines: int, *, chunk: int = READ_CHUNK, follow: bool = False
) -> int:
    """Where the last ``lines`` lines of the regular file at ``path`` begin, as ``tail -n``
    counts them (a last line without ``\\n`` is one). Read back from the end a chunk at a
    time, only as far as those lines go: the tail of a long log costs what it shows.
    Errors as :func:`read_chunks` raises them."""
    fd = open_regular(path, follow=follow)
    try:
        end = os.fstat(fd).st_size
        if lines <= 0 or not end:
            return end
        pos = end - 1 if os.pread(fd, 1, end - 1) == b"\n" else end  # it ends the last line
        while pos > 0:
            start = max(pos - chunk, 0)
            data = os.pread(fd, pos - start, start)
            at = len(data)
            while (at := data.rfind(b"\n", 0, at)) >= 0:
                lines -= 1
                if not lines:
                    return start + at + 1
            pos = start
        return 0
    finally:
        os.close(fd)


def read_lines(
    path: Path | str,
    offset: int = 0,
    *,
    limit: int,
    chunk: int = READ_CHUNK,
    follow: bool = False,
) -> Iterator[bytes]:
    """The lines of the regular file at ``path`` (a stream of lines accel appends to) as
    :func:`read_chunks` reads it from ``offset``, each without its ``\\n`` (the last one
    also without). A line longer than ``limit`` bytes is skipped, as torn and foreign
    lines are by every reader of such a stream: memory stays within ``limit`` and a
    chunk, whatever the file holds (a sparse gigabyte, one line without end)."""
    return _lines(read_chunks(path, offset, chunk=chunk, follow=follow), limit)


def _lines(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    rest, skipping = b"", False
    for data in chunks:
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if not skipping and len(line) <= limit:
                yield line
            skipping = False  # an overlong line ends here
        if len(rest) > limit:
            rest, skipping = b"", True
    if rest and not skipping:
        yield rest


def read_json(
    path: Path | str, *, limit: int = _MAX_JSON_BYTES, follow: bool = False, strict: bool = True
) -> Any:
    """The JSON document in the regular file at ``path``, checked by :func:`parse_json`.

    ``FileNotFoundError`` when there is none; :class:`DamagedFile` for everything else
    that is wrong with it."""
    return parse_json(read_regular(path, limit, follow=follow), path, strict=strict)


def parse_json(data: bytes | str, where: object, *, strict: bool = True) -> Any:
    """``data`` decoded as JSON nested at most :data:`JSON_DEPTH` deep; ``strict``: also
    no NaN or Infinity, no integer beyond :data:`JSON_INT_MAX`, no float that is not
    finite. :class:`DamagedFile` (naming ``where``) otherwise."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if json_depth(raw) > JSON_DEPTH:
        raise DamagedFile(where, f"is nested more than {JSON_DEPTH} levels deep")
    try:
        if strict:
            return json.loads(raw, parse_int=_int, parse_float=_float, parse_constant=_constant)
        return json.loads(raw)
    except _BadNumber as exc:
        raise DamagedFile(where, f"holds the number {exc}, beyond any record's") from None
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise DamagedFile(where, f"is not valid JSON ({exc})") from None


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_INNERMOST = re.compile(rb"\[\]|\{\}")


def json_depth(data: bytes) -> int:
    """How deep the JSON text ``data`` nests, counted up to ``JSON_DEPTH + 1`` (an upper
    bound for text that is not JSON).

    In C but for a pass per level: escapes out (an escaped backslash, then an escaped
    quote: left to right, as a parser reads them), everything but quotes and brackets
    out, the strings out (adjacent quotes first: removing two keeps the rest alternating
    open and close; then every other piece between quotes), then the innermost pairs
    out, one level a pass. A byte at a time in Python, a 3 MB state.bin took longer to
    measure than to parse, at every get.
    """
    opens = data.count(b"[") + data.count(b"{")
    if opens <= JSON_DEPTH:  # the hot path: records with a handful of brackets
        return opens
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in brackets:  # strings that hold brackets
        brackets = b"".join(brackets.split(b'"')[::2])
    depth = 0
    while depth <= JSON_DEPTH:
        brackets, pairs = _INNERMOST.subn(b"", brackets)
        if not pairs:
            return depth + brackets.count(b"[") + brackets.count(b"{")
        depth += 1
    return depth


class _BadNumber(ValueError):
    pass


def _int(text: str) -> int:
    if len(text) > 20 or abs(value := int(text)) > JSON_INT_MAX:
        raise _BadNumber(text if len(text) <= 24 else f"{text[:20]}... ({len(text)} digits)")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(text[:24])
    return value


def _constant(text: str) -> float:
    raise _BadNumber(text)


class TreeUsage(NamedTuple):
    size: int  # bytes of regular files
    files: int
    newest: float | None  # the newest mtime, None for an empty tree


def tree_usage(path: Path) -> TreeUsage:
    """Regular files under ``path`` (``path`` itself when it is one), not following links;
    zeros if it is gone."""
    try:
        top = os.lstat(path)
    except OSError:
        return TreeUsage(0, 0, None)
    if stat.S_ISREG(top.st_mode):
        return TreeUsage(top.st_size, 1, top.st_mtime)
    size = files = 0
    newest: float | None = None
    stack = [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                            continue
                        if not entry.is_file(follow_symlinks=False):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    size += st.st_size
                    files += 1
                    newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
        except OSError:
            continue
    return TreeUsage(size, files, newest)


def tree_size(path: Path) -> int:
    """Bytes of regular files under ``path``, not following links; 0 if it is gone."""
    return tree_usage(path).size


def remove_tree(path: Path, device: int | None = None, *, last: Sequence[str] = ()) -> int:
    """Remove ``path`` without following links or entering other filesystems.

    A link is removed as a link, never its target. ``device``: the filesystem to stay on
    (default: the one ``path`` is on). ``last``: names at the top of ``path`` removed
    after everything else, in that order, so that a removal killed half-way still
    carries them. Returns how many paths had to stay (mount points and what holds them).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        _unlink(path)
        _faults.point("remove.unlinked")
        return 0
    if device is not None and st.st_dev != device:
        return 1
    try:
        with os.scandir(path) as it:
            order = {name: i + 1 for i, name in enumerate(last)}
            children = sorted(it, key=lambda e: order.get(e.name, 0))
    except FileNotFoundError:
        return 0
    left = 0
    for child in children:
        left += remove_tree(Path(child.path), st.st_dev)
    if left == 0:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
        _faults.point("remove.rmdir")
    return left


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- copying around the page cache ----------------------------------------------------------
# The launcher commits the memory tier's snapshots to disk with ``O_DIRECT``: they are
# already in memory, and through the page cache the kernel finds fresh pages for a second
# copy of every byte before any reaches the disk. On a virtual machine whose free memory
# was handed back to its host, each such page faults in the host: 240 MiB took 0.5 to
# 2.5 s to write through the page cache here, and 0.11 to 0.14 s with ``O_DIRECT`` from a
# reused buffer (the disk's own speed), fsync included. On any machine the fsync that
# follows writes the bytes to the disk anyway, so going around the cache costs nothing
# there, and leaves the cache to the training job.
#
# ``O_DIRECT`` needs block-aligned buffers, offsets and lengths: the buffer is an
# anonymous mapping (page-aligned), full chunks are multiples of ``DIRECT_ALIGN``, and
# the tail of a file whose size is not one is written through the cache. A file system
# that refuses ``O_DIRECT`` (tmpfs, some network and FUSE file systems), at the open or at
# a write, gets the rest of the file through the cache: the bytes are the same either way.

DIRECT_ALIGN = 4096  # the largest logical block size in use (4Kn disks); a multiple of 512
DIRECT_CHUNK = 8 << 20
_DIRECT = getattr(os, "O_DIRECT", 0)


def copy_direct(source: BinaryIO, target: Path, update: Callable[[memoryview], None]) -> int:
    """Copy the rest of the open ``source`` to the new file ``target`` (created, never
    replaced) and fsync it, passing every chunk to ``update`` (a hasher) as it goes; the
    bytes copied."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(target, flags | _DIRECT, file_mode())
        direct = bool(_DIRECT)
    except OSError as exc:
        if exc.errno != errno.EINVAL or not _DIRECT:
            raise
        fd, direct = os.open(target, flags, file_mode()), False
    buffer = mmap.mmap(-1, DIRECT_CHUNK)  # page-aligned, reused for every chunk
    view = memoryview(buffer)
    try:
        copied = 0
        while n := source.readinto(view):  # type: ignore[attr-defined]
            update(view[:n])
            aligned = n - n % DIRECT_ALIGN if direct else 0
            if aligned:
                direct = _write_all(fd, view[:aligned], direct)
            if aligned < n:
                direct = _buffered(fd) if direct else False
                _write_all(fd, view[aligned:n], False)
            copied += n
        os.fsync(fd)
        return copied
    finally:
        view.release()
        buffer.close()
        os.close(fd)


def _write_all(fd: int, data: memoryview, direct: bool) -> bool:
    """Write all of ``data``; whether ``fd`` is still direct (a refusal turns it off)."""
    while data:
        try:
            written = os.write(fd, data)
        except OSError as exc:
            if not direct or exc.errno != errno.EINVAL:
                raise
            direct = _buffered(fd)  # this file system's blocks are larger, or it refuses
            continue
        data = data[written:]
        if direct and len(data) % DIRECT_ALIGN:
            direct = _buffered(fd)  # a short write left the rest unaligned
    return direct


def _buffered(fd: int) -> bool:
    """Turn ``O_DIRECT`` off on ``fd`` (the tail, or a refusal); False."""
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_DIRECT)
    return False


def link_below(root: Path | str, path: Path | str) -> str | None:
    """The first of the folders below ``root`` down to ``path`` (itself included) that is a
    symbolic link, or None: a read or write through one could land anywhere, and
    ``O_NOFOLLOW`` guards only the last name. ``root`` itself is the user's to place
    (``workspace.path``, a remote on a mounted disk) and not looked at."""
    current = str(root)
    for part in Path(os.path.relpath(path, root)).parts:
        current = os.path.join(current, part)
        if os.path.islink(current):
            return current
    return None


def make_below(root: Path | str, folder: Path | str) -> str | None:
    """Make the folders below ``root`` down to ``folder`` one at a time, never through a
    symbolic link (``mkdir(parents=True)`` follows one): the first link on the way, made
    since it was looked for, or None once ``folder`` is there."""
    current = str(root)
    for part in Path(os.path.relpath(folder, root)).parts:
        current = os.path.join(current, part)
        try:
            os.mkdir(current)
        except FileExistsError:
            if os.path.islink(current):
                return current
    return None
