"""Worker output on the console: rank-prefixed, stdout on stdout and stderr on stderr.

Pieces arrive as the workers write them (see :mod:`accel.runs.streams`). On a
terminal, a partial line shows at once and a progress bar redraws in place (cut to the
terminal's width, so redraws never wrap); when another rank writes, the line is left
as it is and continued below. Piped (a file, CI), output stays line-oriented: each
redraw shown is a line of its own, at most one a second per stream, and lines of
different ranks never mix. ``accel launch`` and ``accel logs`` both print through it:
``accel launch`` shows each piece at once; ``accel logs`` (``hold``) writes what it
holds at each :meth:`WorkerConsole.flush` or a chunk at a time, in the order written
(a write and a flush per line cost more than the line's bytes).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Callable
from itertools import groupby
from typing import TextIO

from accel.cli import _output
from accel.runs.streams import (
    CONSOLE_REDRAW_EVERY,
    LOG_REDRAW_EVERY,
    NL,
    STDERR,
    STDOUT,
    Interleaver,
    Lines,
    Piece,
    cut_note,
)

_COLOURS = (36, 35, 32, 33, 34, 31)  # cyan, magenta, green, yellow, blue, red
_ERASE = "\r\x1b[K"
# Of a longer line, a terminal shows this much and how much more there was: redrawing a
# line means holding it, and a gigabyte without a newline is no line anyone reads there.
LINE_LIMIT = 1 << 20
HOLD_LIMIT = 1 << 18  # characters held before they are written (``hold``)


class WorkerConsole:
    """The console sink of :class:`accel.runs.logs.LogRouter` (and of ``accel logs``)."""

    def __init__(
        self,
        world_size: int,
        *,
        prefix: bool = True,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        hold: bool = False,
    ) -> None:
        files = {STDOUT: stdout or sys.stdout, STDERR: stderr or sys.stderr}
        self._width = len(str(max(world_size - 1, 0)))
        self._prefix = prefix
        self._out = _Out(hold)
        live = {s: _isatty(f) for s, f in files.items()}
        colour = not os.environ.get("NO_COLOR")
        terminal = _Terminal(files, self._label, colour, self._out) if any(live.values()) else None
        self._lock = threading.Lock()  # the pump thread and the launcher's notices
        self._writers: dict[str, _Terminal | _Pipe] = {
            s: terminal if live[s] and terminal else _Pipe(f, self._label, self._out)
            for s, f in files.items()
        }

    def redraw_every(self, stream: str) -> float:
        """How often a redraw of ``stream`` may be shown."""
        live = isinstance(self._writers[stream], _Terminal)
        return CONSOLE_REDRAW_EVERY if live else LOG_REDRAW_EVERY

    def __call__(self, rank: int, stream: str, piece: Piece) -> None:
        with self._lock:
            self._writers[stream].write(rank, stream, piece)

    def end_line(self) -> None:
        """Before other output: end a line a worker left open, write what is held."""
        with self._lock:
            for writer in dict.fromkeys(self._writers.values()):
                writer.end_line()
            self._out.flush()

    def flush(self) -> None:
        """Write what is held (before a wait for more output)."""
        with self._lock:
            self._out.flush()

    def _label(self, rank: int) -> str:
        return f"[rank{rank:<{self._width}}] " if self._prefix else ""


class _Pipe:
    """A piped stream: as written, a redraw per line, ranks' lines never mixed."""

    def __init__(self, file: TextIO, label: Callable[[int], str], out: _Out) -> None:
        self._file = file
        self._out = out
        self._mix = Interleaver(lambda rank: label(rank).encode(), cr=NL)

    def write(self, rank: int, stream: str, piece: Piece) -> None:
        self._emit(self._mix.render(rank, piece))

    def end_line(self) -> None:
        self._emit(self._mix.end_line())

    def _emit(self, data: bytes) -> None:
        if data:
            self._out.write(self._file, _text(data))


class _Terminal:
    """One terminal (stdout, stderr or both): lines redrawn in place as they grow."""

    def __init__(
        self, files: dict[str, TextIO], label: Callable[[int], str], colour: bool, out: _Out
    ) -> None:
        self._files = files
        self._out = out
        self._label = label
        self._colour = colour
        self._lines: dict[tuple[int, str], Lines] = {}
        self._open: tuple[int, str] | None = None  # the source whose line the cursor is on

    def write(self, rank: int, stream: str, piece: Piece) -> None:
        if len(piece.data) > LINE_LIMIT and piece.start and piece.end == NL and NL in piece.data:
            for line in piece.data.split(NL):  # whole lines: each is held to the limit
                self.write(rank, stream, Piece(line, NL, True, piece.redraw))
            return
        source = (rank, stream)
        lines = self._lines.setdefault(source, Lines(LINE_LIMIT))
        full = lines.full and not piece.start
        finished = lines.add(piece)
        if finished is None and not piece.start and (full or not piece.data):
            return  # the line shows the same until the next segment (or its end)
        was_open = self._open == source
        if not was_open:
            self.end_line()
        erase = _ERASE if was_open else ""
        if finished is None:
            self._emit(stream, erase + self._prefix(rank) + _fit(lines.display, self._room(rank)))
            self._open = source
            return
        if was_open or piece.start or piece.data:  # else: its last state is already shown
            prefix = self._prefix(rank)
            finished += cut_note(lines.dropped)
            body = _text(finished).replace("\n", "\n" + prefix)  # a block of whole lines
            self._emit(stream, f"{erase}{prefix}{body}\n")
        self._open = None

    def end_line(self) -> None:
        if self._open is not None:
            self._emit(self._open[1], "\n")
            self._open = None

    def _prefix(self, rank: int) -> str:
        label = self._label(rank)
        if not label or not self._colour:
            return label
        return f"\x1b[{_COLOURS[rank % len(_COLOURS)]}m{label.rstrip()}\x1b[0m "

    def _room(self, rank: int) -> int:
        return shutil.get_terminal_size().columns - len(self._label(rank)) - 1

    def _emit(self, stream: str, text: str) -> None:
        self._out.write(self._files[stream], text)


class _Out:
    """The text of both streams, in order: written at once, or held (``hold``) until
    :meth:`flush` or until :data:`HOLD_LIMIT` characters are held."""

    def __init__(self, hold: bool) -> None:
        self._hold = hold
        self._held: list[tuple[TextIO, str]] = []
        self._size = 0

    def write(self, file: TextIO, text: str) -> None:
        if not self._hold:
            file.write(text)
            file.flush()
            return
        self._held.append((file, text))
        self._size += len(text)
        if self._size >= HOLD_LIMIT:
            self.flush()

    def flush(self) -> None:
        held, self._held, self._size = self._held, [], 0
        for file, texts in groupby(held, key=lambda item: item[0]):
            file.write("".join(text for _, text in texts))
            file.flush()


def _text(data: bytes) -> str:
    """A worker's bytes as shown: colours kept, no other escape or control (see _output)."""
    return _output.coloured(data.decode("utf-8", errors="replace"))


def _fit(data: bytes, room: int) -> str:
    """A partial line cut to the terminal's width, so that redrawing it never wraps."""
    from rich.cells import cell_len, set_cell_size

    text = _text(data)
    if "\x1b" in text or cell_len(text) <= room:  # colour codes: cannot cut safely
        return text
    return set_cell_size(text, max(room, 1))


def _isatty(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False
