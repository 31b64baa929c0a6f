"""The only place the CLI writes for people or machines.

rich on a terminal; plain, uncoloured text when stdout is not one (pipes, cron, CI).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@cache
def console(stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def out(text: str = "", *, markup: bool = True) -> None:
    """A line for people on stdout (rich markup allowed, stripped when piped; ``markup``
    False for text that quotes paths or names, which may hold brackets)."""
    try:
        if is_terminal():
            console().print(text, markup=markup)
        else:
            print(_strip_markup(text) if markup else text, flush=True)
    except BrokenPipeError:
        gone(sys.stdout)


def raw(text: str) -> None:
    """Text for machines or other programs on stdout, exactly as it is (no rich)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        gone(sys.stdout)


def info(text: str) -> None:
    _err(text, "")


def warn(text: str) -> None:
    _err(f"warning: {text}", "yellow")


def error(text: str) -> None:
    _err(f"error: {text}", "bold red")


def _err(text: str, style: str) -> None:
    try:
        if sys.stderr.isatty():
            console(stderr=True).print(text, style=style or None, markup=False)
        else:
            print(text, file=sys.stderr, flush=True)
    except BrokenPipeError:
        gone(sys.stderr)


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
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on a terminal; aligned plain columns otherwise."""
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    if is_terminal():
        from rich.table import Table
        from rich.text import Text

        t = Table(title=title, title_justify="left")
        for col in columns:
            t.add_column(col, overflow="fold")
        for row in cells:
            t.add_row(*(Text(c) for c in row))
        console().print(t)
        return
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    if title:
        print(title)
    for row in [list(columns), *cells]:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    sys.stdout.flush()


def _strip_markup(text: str) -> str:
    if "[" not in text:
        return text
    from rich.text import Text

    return Text.from_markup(text).plain


class _Bar:
    """:class:`accel.admin.progress.Progress` as a rich progress bar, one task per stage."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar
        self._task: Any = None

    def stage(self, label: str, total: int | None) -> None:
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(label, total=total)

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
