"""Worker output as it is written: pieces of lines, carriage-return redraws, two streams.

A worker's stdout or stderr is a byte stream that :class:`Splitter` cuts into
:class:`Piece` s as it arrives, so nothing waits for a newline:

- a line ended by ``\\n`` comes out whole, at once;
- a segment ended by ``\\r`` is a *redraw* (tqdm-style bars rewrite their line after a
  ``\\r``); it comes out at once unless another redraw of that stream came out less
  than ``redraw_every`` ago. The newest one held back comes out when that time is up,
  so a bar that stalls still shows where it stalled, and thousands of redraws a minute
  become a few;
- bytes without an end yet (a prompt, a bar between two updates) come out once the
  stream has been quiet for ``idle`` seconds.

:class:`Interleaver` writes the pieces of several sources into one output (a rank log,
a piped console) without mixing lines: a line another source left open is ended first,
and resumed later after its prefix again. In rank logs, every segment of stderr starts
with :data:`STDERR_MARK` (stdout is unmarked); :class:`RankLogReader` reads them back.
Pure: callers pass the bytes and the time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

NL, CR = b"\n", b"\r"
STDOUT, STDERR = "stdout", "stderr"
STDERR_MARK = b"[stderr] "
IDLE_FLUSH = 0.2  # seconds of silence after which a partial line is shown
LOG_REDRAW_EVERY = 1.0  # at most one redraw per second and stream in a rank log
CONSOLE_REDRAW_EVERY = 0.1  # a terminal redraws a bar at tqdm's own pace, not faster
_ENDS = re.compile(rb"[\r\n]")


class Piece(NamedTuple):
    """Bytes of one stream. ``end``: ``\\n``, ``\\r`` or b"" (more of the segment may come).

    ``start``: these are the first bytes of a segment (a prefix belongs before them);
    ``redraw``: the segment follows a ``\\r`` and replaces what its line showed. A
    piece that starts with whole lines and ends with ``\\n`` may hold several lines
    (``data`` then contains ``\\n``): each of them gets the prefix.
    """

    data: bytes
    end: bytes
    start: bool
    redraw: bool


class Splitter:
    """One stream's bytes -> pieces; see the module docstring for when each comes out."""

    def __init__(
        self,
        redraw_every: float,
        idle: float = IDLE_FLUSH,
        blocks: bool = True,
        hold: Callable[[bytes], int] | None = None,
    ) -> None:
        self.redraw_every = redraw_every
        self.idle = idle
        self.blocks = blocks  # whole lines in a row come out as one piece (fast)
        # hold(partial) -> trailing bytes a quiet flush keeps back (the start of a secret)
        self._hold = hold
        self._quiet = False  # the last quiet flush kept bytes back: wait for more data
        self._buf = b""  # bytes of the current segment not out yet
        self._started = False  # part of the current segment is out
        self._redraw = False  # the current segment follows a "\r"
        self._open = False  # a piece without "\n" is out: its line is open
        self._held: bytes | None = None  # the newest redraw held back
        self._last_data = 0.0
        self._last_redraw = -math.inf

    @property
    def pending(self) -> bytes:
        """The start of a segment not out yet (empty once part of it is out)."""
        return b"" if self._started else self._buf

    def feed(self, data: bytes, now: float) -> list[Piece]:
        out: list[Piece] = []
        pos, size = 0, len(data)
        while pos < size:
            if self.blocks and self._at_line_start():
                pos = self._whole_lines(data, pos, out)
                if pos >= size:
                    break
            match = _ENDS.search(data, pos)
            if match is None:
                self._buf += data[pos:]
                self._last_data = now
                self._quiet = False
                break
            segment, self._buf = self._buf + data[pos : match.start()], b""
            self._end_segment(segment, match.group(), now, out)
            pos = match.end()
        return out

    def _at_line_start(self) -> bool:
        return not (self._buf or self._started or self._redraw or self._held is not None)

    def _whole_lines(self, data: bytes, pos: int, out: list[Piece]) -> int:
        """Lines without a ``\\r`` from ``pos`` on, as one piece; where they end."""
        stop = data.find(CR, pos)
        last = data.rfind(NL, pos, len(data) if stop < 0 else stop)
        if last < pos:
            return pos
        self._out(out, Piece(data[pos:last], NL, True, False))
        return last + 1

    def flush(self, now: float) -> list[Piece]:
        """What is due by ``now``: a quiet partial segment, a held-back redraw."""
        out: list[Piece] = []
        if self._buf and not self._quiet and now - self._last_data >= self.idle:
            cut = len(self._buf) - (self._hold(self._buf) if self._hold is not None else 0)
            ready, rest = self._buf[:cut], self._buf[cut:]
            self._quiet = bool(rest)
            if ready and (self._started or not self._redraw):
                self._out(out, Piece(ready, b"", not self._started, self._redraw))
                self._buf, self._started = rest, True
            elif ready and self._may_redraw(now):  # a newer state than the one held back
                self._held = None
                self._out(out, Piece(ready, b"", True, True))
                self._buf, self._started = rest, True
        if self._held is not None and self._may_redraw(now):
            self._out(out, Piece(self._held, CR, True, True))
            self._held = None
        return out

    def deadline(self) -> float | None:
        """When :meth:`flush` will have something to do (None: not before more data)."""
        due = []
        throttle = self._last_redraw + self.redraw_every
        if self._buf and not self._quiet:
            quiet = self._last_data + self.idle
            waits_turn = self._redraw and not self._started
            due.append(max(quiet, throttle) if waits_turn else quiet)
        if self._held is not None:
            due.append(throttle)
        return min(due) if due else None

    def close(self) -> list[Piece]:
        """The stream ended: everything left comes out and an open line is ended."""
        out: list[Piece] = []
        if self._buf:
            self._out(out, Piece(self._buf, NL, not self._started, self._redraw))
        elif self._held is not None:
            self._out(out, Piece(self._held, NL, True, True))
        elif self._open:
            self._out(out, Piece(b"", NL, False, self._redraw))
        self._buf, self._held, self._started, self._redraw = b"", None, False, False
        self._quiet = False
        return out

    def _end_segment(self, segment: bytes, end: bytes, now: float, out: list[Piece]) -> None:
        if end == NL:
            if self._redraw and not self._started and not segment and self._held is not None:
                segment, start = self._held, True  # "\r\n" after a held-back redraw
            else:
                start = not self._started and (bool(segment) or not self._redraw)
            self._out(out, Piece(segment, NL, start, self._redraw))
            self._held, self._started, self._redraw = None, False, False
            return
        if self._started:
            self._out(out, Piece(segment, CR, False, self._redraw))
        elif not segment:
            pass  # "\r" at the start of a line, or twice: nothing to show
        elif not self._redraw:
            self._out(out, Piece(segment, CR, True, False))  # a line's first segment
        elif self._may_redraw(now):
            self._held = None
            self._out(out, Piece(segment, CR, True, True))
        else:
            self._held = segment
        self._started, self._redraw = False, True

    def _may_redraw(self, now: float) -> bool:
        if now - self._last_redraw < self.redraw_every:
            return False
        self._last_redraw = now
        return True

    def _out(self, out: list[Piece], piece: Piece) -> None:
        self._open = piece.end != NL
        out.append(piece)


class Interleaver:
    """Pieces of several sources into one output, their lines never mixed.

    ``prefix(source)`` starts each segment (and a line resumed after another source's);
    ``cr`` is what a ``\\r`` becomes: kept in a rank log, ``\\n`` on a piped console.
    """

    def __init__(self, prefix: Callable[[Any], bytes], cr: bytes = CR) -> None:
        self._prefix = prefix
        self._cr = cr
        self._open: Hashable | None = None  # the source whose line the output is in
        self._resume: set[Hashable] = set()  # sources whose open line another one ended

    def render(self, source: Hashable, piece: Piece) -> bytes:
        if not piece.start and source != self._open and not piece.data:
            self._resume.discard(source)  # only an end, for a line already ended
            return b""
        parts = [self.end_line()] if self._open not in (None, source) else []
        prefix = self._prefix(source) if piece.start or source in self._resume else b""
        self._resume.discard(source)
        end = self._cr if piece.end == CR else piece.end
        data = piece.data
        if prefix and NL in data:  # several whole lines: each gets the prefix
            data = data.replace(NL, NL + prefix)
        parts += [prefix, data, end]
        self._open = source if end != NL else None
        return b"".join(parts)

    def end_line(self) -> bytes:
        """End the open line (before text of the output's own, or another source's)."""
        if self._open is None:
            return b""
        self._resume.add(self._open)
        self._open = None
        return NL


class Lines:
    """One stream's pieces -> its finished lines, as a terminal shows them (last redraw).

    ``limit``: at most that many bytes of a segment are kept (its start); ``dropped``
    says how many more the line last finished had, ``full`` that the current segment
    reached the limit (what it shows no longer changes until it ends).
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._current = b""  # the current segment so far
        self._over = 0  # bytes of it beyond the limit, not kept
        self._shown = b""  # the last complete segment (what a "\r\n" leaves on screen)
        self._shown_over = 0
        self.dropped = 0

    @property
    def display(self) -> bytes:
        """What the line shows now."""
        return self._current or self._shown

    @property
    def full(self) -> bool:
        return self._limit is not None and len(self._current) >= self._limit

    def add(self, piece: Piece) -> bytes | None:
        """The finished line (or lines, joined by ``\\n``) when ``piece`` ends one."""
        if piece.start:
            self._current, self._over = b"", 0
        self._keep(piece.data)
        if piece.end == CR:
            self._shown, self._shown_over = self._current, self._over
            self._current, self._over = b"", 0
        if piece.end != NL:
            return None
        if self._current or piece.start:
            line, self.dropped = self._current, self._over
        else:
            line, self.dropped = self._shown, self._shown_over
        self._current = self._shown = b""
        self._over = self._shown_over = 0
        return line

    def _keep(self, data: bytes) -> None:
        room = len(data) if self._limit is None else self._limit - len(self._current)
        self._current += data[: max(room, 0)]
        self._over += max(len(data) - max(room, 0), 0)


def cut_note(dropped: int) -> bytes:
    """What ends a line shown without its last ``dropped`` bytes (:attr:`Lines.dropped`)."""
    return f" [accel: {dropped} more bytes of this line]".encode() if dropped else b""


def log_prefix(source: Hashable) -> bytes:
    """The rank log's prefix of a segment: stderr is marked, stdout is not."""
    return STDERR_MARK if source == STDERR else b""


class RankLogReader:
    """A rank log's bytes -> ``(stream, piece)`` in order, markers removed.

    Within one :meth:`feed`, a redraw that a later piece replaced is skipped: what was
    not watched live shows its final state only. A piece per line, or with ``blocks``,
    whole lines of one stream in a row as one piece (a piece per line costs more than
    the line's bytes, where the line is a plain one).
    """

    def __init__(self, blocks: bool = False) -> None:
        self._splitter = Splitter(redraw_every=0.0, idle=0.0, blocks=blocks)
        self._stream = STDOUT
        self._held: list[tuple[str, Piece]] = []  # a redraw the next feed may replace

    def feed(self, data: bytes, final: bool = False, more: bool = False) -> list[tuple[str, Piece]]:
        """The pieces of ``data``; ``final``: the log ends there; ``more``: the rest of the
        same read follows (a redraw that ends ``data`` waits, and is skipped if more
        pieces come: reading in chunks shows what one read of it all would)."""
        pieces = self._splitter.feed(data, 0.0)
        pending = self._splitter.pending
        if final:
            pieces += self._splitter.close()
        elif not (pending and STDERR_MARK.startswith(pending)):  # a mark half written
            pieces += self._splitter.flush(0.0)
        out, self._held = self._held, []
        for piece in pieces:
            if piece.start and piece.end == NL and not piece.redraw:
                out += self._lines(piece.data)
                continue
            if piece.start:
                marked = piece.data.startswith(STDERR_MARK)
                self._stream = STDERR if marked else STDOUT
                if marked:
                    piece = Piece(piece.data[len(STDERR_MARK) :], piece.end, True, piece.redraw)
            out.append((self._stream, piece))
        out = [
            (stream, piece)
            for i, (stream, piece) in enumerate(out)
            if not (_replaced(piece) and i + 1 < len(out))
        ]
        if more and out and _replaced(out[-1][1]):
            self._held = [out.pop()]
        return out

    def _lines(self, data: bytes) -> list[tuple[str, Piece]]:
        """Whole lines (``data``: one or more, ``\\n`` between them): a piece for each run
        of lines of one stream, each line's mark removed. Each line says on its own which
        stream it is from; stdout lines cost nothing each (only stderr lines are looked at)."""
        out: list[tuple[str, Piece]] = []
        pos = 0  # where the next line starts
        while True:
            marked = _next_marked(data, pos)
            if marked < 0:
                out.append((STDOUT, Piece(data[pos:], NL, True, False)))
                break
            if marked > pos:
                out.append((STDOUT, Piece(data[pos : marked - 1], NL, True, False)))
            end = _end_of_marked(data, marked)
            lines = data[marked + len(STDERR_MARK) : end].replace(_NL_MARK, NL)
            out.append((STDERR, Piece(lines, NL, True, False)))
            if end == len(data):
                break
            pos = end + 1
        self._stream = out[-1][0]
        return out


_NL_MARK = NL + STDERR_MARK


def _next_marked(data: bytes, pos: int) -> int:
    """Where the first stderr line at or after the line start ``pos`` starts (-1: none)."""
    if data.startswith(STDERR_MARK, pos):
        return pos
    found = data.find(_NL_MARK, pos)
    return found + 1 if found >= 0 else -1


def _end_of_marked(data: bytes, pos: int) -> int:
    """Where the run of stderr lines starting at ``pos`` ends (its last line's end)."""
    while (end := data.find(NL, pos)) >= 0 and data.startswith(STDERR_MARK, end + 1):
        pos = end + 1
    return len(data) if end < 0 else end


def _replaced(piece: Piece) -> bool:
    """A whole redraw: what a later piece of its read replaces."""
    return piece.start and piece.end == CR
