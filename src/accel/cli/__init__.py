"""The ``accel`` command line: one module per command, domain code outside ``cli/``."""

from __future__ import annotations

import sys

from accel.errors import EXIT_INTERRUPTED


def run() -> None:
    """The ``accel`` console script (and ``python -m accel``).

    The command's modules (typer, rich, the commands: ~0.1 s) load in here, so a Ctrl-C
    while they load ends the command as one later does, with one line and exit 130, not
    with Python's traceback of an import. The window left is the interpreter's own start
    and this package's import (``accel/__init__.py`` keeps it small).
    """
    try:
        from accel.cli.main import run as command

        command()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_INTERRUPTED) from None
