"""The only place the CLI writes for people or machines.

rich on a terminal; plain, uncoloured text when stdout is not one (pipes, cron, CI).

Data is text: what comes from data (argv, run records, tags, manifests, log lines, keys,
config values) is never read as rich markup, and nothing printed here, to a terminal or
not, carries terminal control characters (only ``--json`` output is JSON's own business).
A line is markup only when its caller says so (``out(..., markup=True)``), and then every
piece of data in it goes through :func:`text`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from accel.errors import OutputFailed

if TYPE_CHECKING:
    from rich.console import Console


# C0 but newline and tab (ESC starts every escape sequence, CR overwrites the line), DEL,
# C1 (0x9b is a one-byte CSI) and the bidi overrides and isolates, which reorder the text.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROLS = re.compile(_CONTROL.pattern + "+")  # a run at once: a sparse log is megabytes of NUL


def text(value: object) -> str:
    """``value`` as it is, safe inside a line of rich markup: brackets escaped, terminal
    control characters removed. The one way data gets into a markup line."""
    from rich.markup import escape

    return escape(_clean(str(value)))


def _clean(text: str) -> str:
    # isprintable() is False for every character _CONTROL matches (Cc, and the bidi
    # controls are Cf): most text has none, and the check is a C loop, not a regex
    return text if text.isprintable() else _CONTROLS.sub("", text)


_SGR = re.compile("(\x1b\\[[0-9;:]*m)")  # colours and styles: they cannot move or clear
# a whole escape sequence: CSI (ESC [ or 0x9b), or OSC/DCS/SOS/PM/APC up to BEL or ST
_SEQUENCE = re.compile(
    "(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]"
    "|(?:\x1b[\\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\\\|\x9c)?"
)
_INTRODUCER = re.compile("[\x1b\x90\x98\x9b\x9d\x9e\x9f]")  # what every sequence starts with


def coloured(text: str) -> str:
    """A program's own output for a terminal: its colours kept, every other escape
    sequence (clear the screen, set the title, move the cursor) and control character
    removed (newline and tab stay)."""
    if not _CONTROL.search(text):
        return text
    parts = _SGR.split(text)
    return "".join(part if i % 2 else _clean(_sequences_out(part)) for i, part in enumerate(parts))


def _sequences_out(text: str) -> str:
    # searching for where a sequence may start first is what makes a megabyte of plain
    # control characters (a sparse log) cost milliseconds, not a second
    return _SEQUENCE.sub("", text) if _INTRODUCER.search(text) else text


def _cell(value: object) -> str:
    if value is None:
        return ""
    text = str(value)
    if text.isprintable():  # no control, no newline, no tab: the table's many cells
        return text
    return _clean(text).replace("\n", " ").replace("\t", " ")


@cache
def console(stderr: bool = False) -> Console:
    from rich.console import Console

    # no emoji: ``:name:`` in data stays as it is, markup or not
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def out(line: str = "", *, markup: bool = False) -> None:
    """A line for people on stdout, as plain text; ``markup`` True when the caller wrote
    rich markup into it (styles, stripped when piped), each piece of data through
    :func:`text`."""
    line = _clean(line)
    with _writing(sys.stdout):
        if is_terminal():
            console().print(line, markup=markup)
        else:
            print(_strip_markup(line) if markup else line, flush=True)


def raw(line: str) -> None:
    """Text for machines or other programs on stdout, as it is (no rich), less terminal
    control characters."""
    with _writing(sys.stdout):
        print(_clean(line), flush=True)


def info(text: str) -> None:
    _err(text, "")


def warn(text: str) -> None:
    _err(f"warning: {_one_line(text)}", "yellow")


def error(text: str) -> None:
    _err(f"error: {_one_line(text)}", "bold red")


def _one_line(text: str) -> str:
    """A warning or an error is one line, whatever it quotes: a file or variable name may
    hold a newline, and the line after it would pass for another message."""
    return text.strip("\n").replace("\n", "\\n")


def _err(text: str, style: str) -> None:
    text = _clean(text)
    try:
        if sys.stderr.isatty():
            console(stderr=True).print(text, style=style or None, markup=False)
        else:
            print(text, file=sys.stderr, flush=True)
    except BrokenPipeError:
        gone(sys.stderr)


@contextlib.contextmanager
def _writing(stream: Any) -> Iterator[None]:
    """Output to ``stream`` (stdout): a reader that went away is dropped quietly
    (:func:`gone`); a refused write (``> /dev/full``) is :class:`OutputFailed`, one line
    about the output, never the workspace's "free space (`accel clean`)"."""
    try:
        yield
    except BrokenPipeError:
        gone(stream)
    except OSError as exc:
        if exc.errno is None:
            raise
        gone(stream)
        raise OutputFailed(
            f"could not write the output: {os.strerror(exc.errno)}; free space where it "
            "goes, or send it elsewhere"
        ) from None


def gone(stream: Any) -> None:
    """The reader went away (``accel ... | head``): drop what is left, quietly.

    The command goes on and exits with its own code, not 1 for a closed pipe; Python
    would otherwise fail again flushing the stream at exit.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def print_json(obj: Any) -> None:
    with _writing(sys.stdout):  # `accel status --json | true`: as the text forms, not exit 1
        sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
        sys.stdout.flush()


RICH_ROWS = 1000  # the longest listing drawn as a rich table on a terminal


def table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, plain: bool = False
) -> None:
    """A rich table on a terminal; aligned plain columns otherwise, or when ``plain``, or
    past :data:`RICH_ROWS` rows (rich lays out 20,000 rows of `cache list` in 8 s and
    150 MB, plain columns in a second). A cell is one line of text, never markup."""
    cells = [[_cell(c) for c in row] for row in rows]
    if is_terminal() and not plain and len(cells) <= RICH_ROWS:
        from rich.table import Table
        from rich.text import Text

        t = Table(title=Text(_clean(title)) if title else None, title_justify="left")
        for col in columns:
            t.add_column(Text(col), overflow="fold")
        for row in cells:
            t.add_row(*(Text(c) for c in row))
        with _writing(sys.stdout):
            console().print(t)
        return
    # one write, widths computed column-wise
    widths = [max(map(len, column)) for column in zip(columns, *cells, strict=True)]
    pattern = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    lines = [_clean(title)] if title else []
    lines += [pattern.format(*row).rstrip() for row in [list(columns), *cells]]
    with _writing(sys.stdout):
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()


def _strip_markup(text: str) -> str:
    if "[" not in text:
        return text
    from rich.text import Text

    return Text.from_markup(text, emoji=False).plain


class _Bar:
    """:class:`accel.admin.progress.Progress` as a rich progress bar, one task per stage."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar
        self._task: Any = None

    def stage(self, label: str, total: int | None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(text(label), total=total)  # a column of markup

    def advance(self, amount: int) -> None:
        if self._task is not None:
            self._bar.advance(self._task, amount)


def byte_bar(label: str) -> Any:
    """A rich progress bar of bytes (done, rate, time left) on stderr; it vanishes when
    it stops. Unstarted: use it as a context manager, or ``start()``/``stop()``."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(label),
        BarColumn(),
        DownloadColumn(binary_units=True),
        speed_column(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=True,
    )


def speed_column() -> Any:
    """The rate in binary units (MiB/s), as the summary lines give it; rich's own column
    says MB/s."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    from accel.units import format_size

    class BinarySpeedColumn(ProgressColumn):  # type: ignore[misc]
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            shown = "?" if speed is None else f"{format_size(speed)}/s"
            return Text(shown, style="progress.data.speed")

    return BinarySpeedColumn()


@contextlib.contextmanager
def progress() -> Iterator[Any]:
    """A progress bar on stderr when it is a terminal (stdout stays clean for --json);
    a silent one otherwise."""
    from accel.admin.progress import SILENT

    if not sys.stderr.isatty():
        yield SILENT
        return
    with byte_bar("{task.description}") as bar:
        yield _Bar(bar)


def confirm(question: str) -> bool:
    """Ask ``question [y/N]`` on the terminal: True for yes; no, an empty line and end of
    input (Ctrl-D) are a no. Ctrl-C is an interrupt at whatever instant it lands.

    click's prompt reads with a blocking ``input()``: a SIGINT that arrives after the
    prompt is written but before the read starts is seen only when the read returns, so
    Ctrl-C seemed ignored until Enter. Here the signal also wakes the wait
    (``signal.set_wakeup_fd``), and Python raises ``KeyboardInterrupt`` as it returns.
    """
    import select
    import signal

    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # not a real stream (a test's runner)
        fd = -1
    if fd < 0 or not os.isatty(fd):
        import typer

        try:
            return bool(typer.confirm(question, default=False))
        except typer.Abort as exc:
            if isinstance(exc.__context__, EOFError):
                return False
            raise KeyboardInterrupt from None
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    try:
        previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: no signal reaches this wait anyway
        previous = None
    try:
        while True:
            sys.stdout.write(f"{question} [y/N]: ")
            sys.stdout.flush()
            line = b""
            while not line.endswith(b"\n"):
                ready = select.select([fd, wake_r], [], [])[0]
                if wake_r in ready:
                    os.read(wake_r, 64)  # a signal: Python acts on it on the next line
                    continue
                chunk = os.read(fd, 1024)
                if not chunk:  # end of input
                    sys.stdout.write("\n")
                    return False
                line += chunk
            answer = line.decode(errors="replace").strip().lower()
            if answer in ("y", "yes"):
                return True
            if answer in ("", "n", "no"):
                return False
            sys.stdout.write("Error: invalid input\n")
    finally:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(wake_r)
        os.close(wake_w)
