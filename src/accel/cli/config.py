"""``accel config``: write, show, get, set, unset, validate, import, schema."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _help, _output
from accel.errors import JobFailed, UsageError, WorkspaceError

if TYPE_CHECKING:
    from accel.workspace import Workspace

app = typer.Typer(
    help=(
        "Write, show and change the project configuration; `accel config` alone asks a few "
        "questions on a terminal and edits the file."
    ),
    invoke_without_command=True,
    no_args_is_help=False,
)


@app.callback()
def config(
    ctx: typer.Context,
    default: bool = typer.Option(
        False, "--default", "--yes", "-y", help="Write the defaults without asking (CI)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing project file."),
) -> None:
    """Without a subcommand: a short questionnaire that edits the project file."""
    if ctx.invoked_subcommand is not None:
        return
    from accel.config import project

    ws = _app.workspace(ctx)
    if not default:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("not a terminal: run `accel config --default` to write the defaults")
        _questionnaire(ws)
        return
    if ws.config_file.is_dir():  # not a file that exists: neither kept nor replaceable
        raise WorkspaceError(
            f"{ws.config_file} is a folder where the config file belongs: move it away, "
            "then run `accel config --default` again"
        )
    if not force and project.exists(ws):
        ws.ensure_root().ensure_gitignore()
        _output.out(f"{ws.config_file} exists; left unchanged (--force replaces it)")
        return
    _output.out(f"wrote {project.write(ws, {})}")


def _questionnaire(ws: Workspace) -> None:
    """Ask, starting from the current values; show the diff; write only when confirmed."""
    from rich.prompt import Confirm

    from accel.cli._questionnaire import ask, changes, overrides
    from accel.config import project
    from accel.config.edit import unified_diff
    from accel.config.resolve import resolve

    config = ws.config  # a broken file stops here, with its line: fix it first
    in_file = resolve(project=ws.config_layers()[0], user=None, env={})  # what git tracks
    answers = ask(in_file.values, overrides(config))
    fresh = not project.exists(ws)
    before, after = project.plan_edit(ws, changes(answers, in_file, fresh))
    diff = unified_diff(before, after, ws.config_file)
    if not diff:
        _output.out(f"no changes: {ws.config_file} is left as it is")
        return
    for line in diff:
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        shown = _output.text(line)
        _output.out(f"[{style}]{shown}[/{style}]" if style else shown, markup=True)
    if not Confirm.ask(f"Write {_output.text(ws.config_file)}?", default=True):
        _output.out("nothing written")
        return
    _output.out(f"wrote {project.write_edit(ws, before, after)}")


@app.command()
def show(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for machines."),
    origin: bool = typer.Option(False, "--origin", help="Where each value came from."),
) -> None:
    """Show the effective configuration (all layers applied; secrets shown as ***)."""
    from accel._redact import redact_mapping

    cfg = _app.workspace(ctx).config
    shown = redact_mapping(cfg.values)
    if as_json:
        payload: dict[str, Any] = {"config": redact_mapping(cfg.nested())}
        if origin:
            payload["origins"] = {k: _origin_json(o) for k, o in cfg.origins.items()}
        _output.print_json(payload)
        return
    columns = ["key", "value"] + (["origin"] if origin else [])
    rows = [
        [key, _show_value(value, key)] + ([str(cfg.origins[key])] if origin else [])
        for key, value in shown.items()
    ]
    _output.table(None, columns, rows)


def _origin_json(origin: Any) -> dict[str, Any]:
    return {"layer": origin.layer, "source": origin.source or None, "line": origin.line}


def _shown(key: str, value: Any) -> str:
    """One value for people: secrets (``launch.env`` tokens, URL passwords) as ***; for
    ``launch.env.NAME``, that variable's value."""
    from accel._redact import redact_mapping
    from accel.config import schema

    found = schema.entry(key)
    if found is not None:
        f, name = found
        return str(redact_mapping({f.key: {name: value}})[f.key][name])
    return _show_value(redact_mapping({key: value})[key], key)


def _show_value(value: Any, key: str = "") -> str:
    """As the config file writes it: ``10s``, ``10MiB``, ``false``, ``null``."""
    from accel.config.schema import display

    return display(key, value)


@app.command(cls=_help.Command)
def get(
    ctx: typer.Context,
    key: str = typer.Argument(
        ..., metavar="KEY", help="A dotted key, or a section for all its keys."
    ),
) -> None:
    """Print one effective value, or each key of a section (secrets shown as ***)."""
    from accel.config import schema

    config = _app.workspace(ctx).config
    if key in schema.SECTIONS:
        rows = [[f.key, _shown(f.key, config[f.key])] for f in schema.FIELDS if f.section == key]
        _output.table(None, ["key", "value"], rows)
        return
    found = schema.entry(key)
    if found is not None:  # launch.env.NAME: one variable
        f, name = found
        variables = config[f.key]
        if name not in variables:
            raise JobFailed(f"{f.key} has no variable {name!r} (`accel config get {f.key}`)")
        _output.raw(_shown(key, variables[name]))
        return
    f = schema.field(key)
    _output.raw(_shown(f.key, config[f.key]))


# A VALUE may start with '-' (`-1`, a negative number to be refused as such, not as an
# unknown option): what follows KEY is the value.
@app.command("set", cls=_help.Command, context_settings={"ignore_unknown_options": True})
def set_(
    ctx: typer.Context,
    key: str = typer.Argument(..., metavar="KEY", help="A dotted key, e.g. launch.num_processes."),
    value: str = typer.Argument(..., metavar="VALUE", help="The new value."),
) -> None:
    """Set a key in the project file (validated, atomic, comments kept)."""
    from accel.config import project

    new = project.set_value(_app.workspace(ctx), key, value)
    _output.out(f"{key} = {_shown(key, new)}")


@app.command(cls=_help.Command)
def unset(
    ctx: typer.Context, key: str = typer.Argument(..., metavar="KEY", help="A dotted key.")
) -> None:
    """Remove a key from the project file (its default applies again)."""
    from accel.config import project

    removed = project.unset_value(_app.workspace(ctx), key)
    _output.out(f"{key} unset" if removed else f"{key} was not set in the project file")


@app.command(cls=_help.Command)
def validate(
    ctx: typer.Context,
    path: Path | None = typer.Argument(
        None, metavar="PATH", help="A file to check (default: the project's)."
    ),
) -> None:
    """Check a config file (and the effective configuration) against the schema."""
    from accel.config import project
    from accel.config.resolve import read_layer

    if path is not None:
        if read_layer("file", path) is None:
            raise UsageError(f"{path}: no such file")
        _output.out(f"{path}: valid")
        return
    ws = _app.workspace(ctx)
    _ = ws.config
    where = ws.config_file if project.exists(ws) else "defaults (no project file)"
    _output.out(f"{where}: valid")


@app.command("import", cls=_help.Command)
def import_(
    ctx: typer.Context,
    path: Path = typer.Argument(
        ..., metavar="PATH", help="A Hugging Face Accelerate default_config.yaml."
    ),
) -> None:
    """Import a Hugging Face Accelerate config into the project file."""
    from accel.config import project

    result = project.import_hf(_app.workspace(ctx), path)
    for key, value in result.values.items():
        _output.out(f"{key} unset" if value is None else f"{key} = {_shown(key, value)}")
    for note in result.notes:
        _output.warn(note)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the config file, for editors."""
    from accel.config import schema as config_schema

    _output.print_json(config_schema.json_schema())
