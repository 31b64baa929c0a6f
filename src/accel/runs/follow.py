"""``accel logs``: read a run's rank logs back, as the live console showed them.

:func:`follow` yields what each rank log gained, piece by piece (stdout and stderr
apart, partial lines and progress bars as they were written), until the logs end or,
with ``live``, until the run's launcher is gone. Rendering is the caller's; it may
hold what it renders until ``pause`` is called, before each wait for more output.

A log is read a chunk at a time and its pieces go out as they are read: memory stays
within a few chunks whatever the log's size, and the first lines show at once. Chunks
are cut after a line (so each shows what one read of the whole log would), and inside
a line only when it is longer than :data:`CARRY`: after a redraw, else between
characters. Whole lines of one stream in a row go out as one piece. ``tail`` starts
each log at its last lines, found by reading back from its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from accel._fs import read_chunks, tail_offset
from accel.layout import Layout
from accel.runs.live import is_live
from accel.runs.logindex import start_offset
from accel.runs.record import RunRecord
from accel.runs.streams import CR, NL, Lines, Piece, RankLogReader, cut_note

__all__ = ["LogReader", "follow", "select_logs"]

Keep = Callable[[str], bool]
Event = tuple[int, str, Piece]  # rank, stream, piece
POLL = 0.2  # seconds between reads of a live run's logs
CHUNK = 1 << 18  # bytes read at a time
CARRY = 1 << 18  # bytes of a line without end read before they go out in pieces
MAX_LINE = 1 << 20  # bytes of a line --grep matches and shows (the line's start)


def select_logs(record: RunRecord, wanted: set[int]) -> dict[int, Path]:
    """The run's rank logs, only the ``wanted`` ranks when any are named."""
    return {r: p for r, p in record.rank_logs().items() if not wanted or r in wanted}


class LogReader:
    """What each rank log gained since the last :meth:`read`.

    A redraw that a later one replaced is skipped; with ``keep`` (``--grep``), whole
    lines only, those it keeps (of a line longer than :data:`MAX_LINE`, its start and
    how much more there was). ``cutoff`` (``--since``) starts each log there; ``tail``
    (``--tail``) starts each of ``files`` at its last ``tail`` lines (or at ``cutoff``,
    whichever is later). Logs added later are new: read from their start (or cutoff).
    """

    def __init__(
        self,
        files: dict[int, Path],
        keep: Keep | None = None,
        cutoff: float | None = None,
        tail: int | None = None,
    ) -> None:
        self.keep = keep
        self.cutoff = cutoff
        self.offsets: dict[int, int] = {}
        self.files: dict[int, Path] = {}
        self.readers: dict[int, RankLogReader] = {}
        self.lines: dict[tuple[int, str], Lines] = {}
        self.add(files, tail)

    def add(self, files: dict[int, Path], tail: int | None = None) -> None:
        for r, p in files.items():
            if r not in self.files:
                self.files[r] = p
                self.offsets[r] = max(start_offset(p, self.cutoff), _tail_start(p, tail))
                self.readers[r] = RankLogReader(blocks=self.keep is None)

    def read(self, final: bool = False) -> Iterator[Event]:
        for r, path in sorted(self.files.items()):
            try:
                chunks = read_chunks(path, self.offsets[r], chunk=CHUNK)
            except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
                continue
            yield from self._read(r, chunks, final)

    def _read(self, rank: int, chunks: Iterator[bytes], final: bool) -> Iterator[Event]:
        rest = b""
        try:
            for data in chunks:
                self.offsets[rank] += len(data)
                rest += data
                cut = _cut(rest)
                yield from self._feed(rank, rest[:cut], final=False, more=True)
                rest = rest[cut:]
        except OSError:  # a read failed half-way: what was read stands
            pass
        yield from self._feed(rank, rest, final=final, more=False)

    def _feed(self, rank: int, data: bytes, final: bool, more: bool) -> Iterator[Event]:
        for stream, piece in self.readers[rank].feed(data, final, more):
            yield from self._kept(rank, stream, piece)

    def _kept(self, rank: int, stream: str, piece: Piece) -> Iterator[Event]:
        if self.keep is None:
            yield rank, stream, piece
            return
        lines = self.lines.setdefault((rank, stream), Lines(MAX_LINE))
        line = lines.add(piece)
        if line is not None and self.keep(line.decode("utf-8", errors="replace")):
            yield rank, stream, Piece(line + cut_note(lines.dropped), NL, True, False)


def _tail_start(path: Path, lines: int | None) -> int:
    if lines is None:
        return 0
    try:
        return tail_offset(path, lines)
    except (OSError, ValueError):  # a FIFO, a device, a link: read() skips it too
        return 0


def _cut(data: bytes) -> int:
    """How much of ``data`` goes out now: up to its last line end, unless what follows is
    longer than :data:`CARRY`; then up to its last redraw, or its last whole character."""
    if len(data) <= CARRY:
        return data.rfind(NL) + 1
    for end in (data.rfind(NL) + 1, data.rfind(CR) + 1):
        if end and len(data) - end <= CARRY:
            return end
    end = len(data)
    for back in range(1, min(4, end + 1)):  # never inside a UTF-8 sequence: pieces decode alone
        byte = data[end - back]
        if byte < 0x80:
            break
        if byte >= 0xC0:  # the lead byte of a sequence of 2, 3 or 4 bytes
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return end if back >= length else end - back
    return end


def follow(
    layout: Layout,
    record: RunRecord,
    wanted: set[int],
    *,
    live: bool = False,
    keep: Keep | None = None,
    cutoff: float | None = None,
    tail: int | None = None,
    pause: Callable[[], None] | None = None,
) -> Iterator[Event]:
    """Every piece of the logs; with ``live``, new ones too while the run is live.
    ``pause()`` is called before each wait (a console shows what it holds)."""
    reader = LogReader(select_logs(record, wanted), keep, cutoff, tail)
    yield from reader.read(final=not live)
    while live and is_live(layout, record.id):
        if pause is not None:
            pause()
        time.sleep(POLL)
        reader.add(select_logs(record, wanted))
        yield from reader.read()
    if live:
        reader.add(select_logs(record, wanted))
        yield from reader.read(final=True)
