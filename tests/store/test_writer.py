"""The stream writer: every byte lands in order, write-back keeps pace behind the writer,
and a finished file leaves the page cache (the next save reuses those pages)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from accel.store._stream import StreamWriter

from .pagecache import needs_page_cache_control, resident_bytes

CHUNK = 64 << 10


def _pieces(total: int, seed: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    out, left = [], total
    while left:
        n = min(left, rng.choice([1, 7, 4096, CHUNK - 1, CHUNK, 3 * CHUNK + 5]))
        out.append(rng.randbytes(n))
        left -= n
    return out


def test_every_byte_lands_in_order(tmp_path: Path) -> None:
    pieces = _pieces(2 << 20)
    path = tmp_path / "f"
    with open(path, "xb", buffering=0) as fh:
        out = StreamWriter(fh.fileno(), chunk=CHUNK, window=2)
        for piece in pieces:
            out.write(piece)
        out.finish()
    assert out.written == sum(map(len, pieces))
    assert path.read_bytes() == b"".join(pieces)


def test_write_back_keeps_pace_and_the_file_leaves_the_cache(tmp_path: Path) -> None:
    needs_page_cache_control(tmp_path)
    # Chunks of 2 MiB: the page cache may hold a file in folios that large, and a range
    # is dropped only in whole folios.
    path, chunk, window = tmp_path / "f", 2 << 20, 2
    peak = 0
    with open(path, "xb", buffering=0) as fh:
        out = StreamWriter(fh.fileno(), chunk=chunk, window=window)
        for piece in _pieces(24 << 20):
            out.write(piece)
            peak = max(peak, resident_bytes(path))
        out.finish()
        assert resident_bytes(path) == 0
    # At most the window and the chunk being written: the rest was written back and
    # dropped while the writer went on.
    assert 0 < peak <= (window + 2) * chunk


def test_a_file_that_cannot_have_write_behind_is_written_plainly() -> None:
    fd = os.open(os.devnull, os.O_WRONLY)  # sync_file_range refuses it (ESPIPE)
    try:
        out = StreamWriter(fd, chunk=CHUNK, window=1)
        for piece in _pieces(1 << 20):
            out.write(piece)
        assert out.written == 1 << 20
    finally:
        os.close(fd)
