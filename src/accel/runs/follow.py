"""``accel logs``: read a run's rank logs back, as the live console showed them.

:func:`follow` yields what each rank log gained, piece by piece (stdout and stderr
apart, partial lines and progress bars as they were written), until the logs end or,
with ``live``, until the run's launcher is gone. Rendering is the caller's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from accel._fs import read_from
from accel.layout import Layout
from accel.runs.live import is_live
from accel.runs.logindex import start_offset
from accel.runs.record import RunRecord
from accel.runs.streams import NL, Lines, Piece, RankLogReader

__all__ = ["LogReader", "follow", "select_logs"]

Keep = Callable[[str], bool]
Event = tuple[int, str, Piece]  # rank, stream, piece
POLL = 0.2  # seconds between reads of a live run's logs


def select_logs(record: RunRecord, wanted: set[int]) -> dict[int, Path]:
    """The run's rank logs, only the ``wanted`` ranks when any are named."""
    return {r: p for r, p in record.rank_logs().items() if not wanted or r in wanted}


class LogReader:
    """What each rank log gained since the last :meth:`read`.

    A redraw that a later one replaced is skipped; with ``keep`` (``--grep``), whole
    lines only, those it keeps. ``cutoff`` (``--since``) starts each log there.
    """

    def __init__(
        self, files: dict[int, Path], keep: Keep | None = None, cutoff: float | None = None
    ) -> None:
        self.keep = keep
        self.cutoff = cutoff
        self.offsets: dict[int, int] = {}
        self.files: dict[int, Path] = {}
        self.readers: dict[int, RankLogReader] = {}
        self.lines: dict[tuple[int, str], Lines] = {}
        self.add(files)

    def add(self, files: dict[int, Path]) -> None:
        for r, p in files.items():
            if r not in self.files:
                self.files[r] = p
                self.offsets[r] = start_offset(p, self.cutoff)
                self.readers[r] = RankLogReader()

    def read(self, final: bool = False) -> Iterator[Event]:
        for r, path in sorted(self.files.items()):
            try:
                data = read_from(path, self.offsets[r])
            except (OSError, ValueError):  # ValueError: a FIFO or device (never waited on)
                continue
            self.offsets[r] += len(data)
            for stream, piece in self.readers[r].feed(data, final):
                yield from self._kept(r, stream, piece)

    def _kept(self, rank: int, stream: str, piece: Piece) -> Iterator[Event]:
        if self.keep is None:
            yield rank, stream, piece
            return
        line = self.lines.setdefault((rank, stream), Lines()).add(piece)
        if line is not None and self.keep(line.decode("utf-8", errors="replace")):
            yield rank, stream, Piece(line, NL, True, False)


def follow(
    layout: Layout,
    record: RunRecord,
    wanted: set[int],
    *,
    live: bool = False,
    keep: Keep | None = None,
    cutoff: float | None = None,
) -> Iterator[Event]:
    """Every piece of the logs; with ``live``, new ones too while the run is live."""
    reader = LogReader(select_logs(record, wanted), keep, cutoff)
    yield from reader.read(final=not live)
    while live and is_live(layout, record.id):
        time.sleep(POLL)
        reader.add(select_logs(record, wanted))
        yield from reader.read()
    if live:
        reader.add(select_logs(record, wanted))
        yield from reader.read(final=True)
