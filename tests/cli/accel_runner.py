"""Drive ``accel`` in-process through click's CliRunner, via the real entry point.

``accel.cli.main.main`` is where errors become exit codes and a command's returned
code becomes the exit status; invoking the Typer app directly would skip both.
"""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner, Result

from accel.cli.main import main

_runner = CliRunner()


@click.command(
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def _accel(argv: tuple[str, ...]) -> None:
    sys.exit(main(list(argv)))


def cli(*args: str) -> Result:
    """``accel ARGS`` in this process: exit_code, stdout and stderr apart."""
    return _runner.invoke(_accel, list(args))


HEAVY = ("torch", "numpy", "safetensors")

_WITHOUT = """
import sys
from accel.cli.main import main
for args in {commands!r}:
    assert main(list(args)) == 0, args
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
assert not loaded, loaded[:5]
"""


def runs_without_heavy_imports(*commands: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """Run each of ``commands`` in one fresh interpreter (each must exit 0); the process
    fails when any of them imported torch, numpy or safetensors."""
    code = _WITHOUT.format(commands=commands, heavy=HEAVY)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
