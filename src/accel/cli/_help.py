"""Help that reads like one program: how arguments are shown, and ``accel help``.

typer shows a required argument as ``{script}`` in the usage line, an optional one as
``[run]`` (``[run]...`` when repeated), and the type beside each (``<str>``, ``<path>``).
accel shows the argument's placeholder as it is declared (``metavar="SCRIPT"``), the
way options show theirs: ``SCRIPT``, ``[RUN]``, ``[RUN]...``, with no type beside it.
A command with arguments is declared with ``cls=Command``. The placeholders themselves
(``DURATION``, ``SIZE``, ``PATH``, ``N``, ...) are named where each option is declared;
tests/cli/test_help_conventions.py holds every command to them.
"""

from __future__ import annotations

import copy
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup


class Command(TyperCommand):
    """A command whose arguments read as ``NAME``, ``[NAME]`` and ``[NAME]...``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument):
                param.type = _untyped(param.type)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                pieces.append(usage(param))
        return pieces


def usage(param: TyperArgument) -> str:
    """An argument in the usage line: ``NAME``, or ``[NAME]`` when it may be left out,
    followed by ``...`` when it takes several words."""
    name = param.metavar or (param.name or "").upper()
    piece = name if param.required else f"[{name}]"
    return f"{piece}..." if param.nargs != 1 else piece


def _untyped(kind: Any) -> Any:
    """The argument's type, converting as before, with no ``<str>`` shown beside its
    placeholder (typer shows what the type's ``get_metavar`` gives, else ``<name>``)."""
    quiet = copy.copy(kind)  # the types are shared: str's is one object for every argument
    quiet.get_metavar = lambda param, ctx: ""
    return quiet


def help_command(
    ctx: typer.Context,
    command: list[str] = typer.Argument(
        None, metavar="COMMAND", help="A command, then a subcommand of it (default: accel)."
    ),
) -> None:
    """Show the help of accel or of a command: `accel help X` is `accel X --help`."""
    target = ctx.find_root()
    for word in command or ():
        group = target.command
        if not isinstance(group, TyperGroup):
            target.fail(f"'{target.command_path}' has no command '{word}'")
        # Unknown: "No such command", with typer's did-you-mean, as for `accel nosuch`.
        name, found, _ = group.resolve_command(target, [word])
        if name is None or found is None:  # resolve_command has said so already
            target.fail(f"No such command '{word}'")
        # Made without its arguments: resilient, so a required one is not missed and no
        # callback runs; then not, so that the next word's lookup can say "No such command".
        target = found.make_context(name, [], parent=target, resilient_parsing=True)
        target.resilient_parsing = False
    typer.echo(target.get_help(), color=target.color)  # what --help itself prints
