"""``accel``: the entry point. Exceptions become exit codes here and nowhere else.

0 ok, 1 the job failed, 2 bad usage/config/input, 130 interrupted; anything
unexpected prints one line and leaves the traceback in a crash log.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import sys
import traceback
from pathlib import Path

import typer

from accel._redact import redact_text, scrub, secret_values
from accel._version import __version__
from accel.cli import _app, _help, _output
from accel.cli import cache as cache_cmd
from accel.cli import checkpoints as checkpoints_cmd
from accel.cli import clean as clean_cmd
from accel.cli import config as config_cmd
from accel.cli import env as env_cmd
from accel.cli import launch as launch_cmd
from accel.cli import runs as runs_cmd
from accel.cli import stack as stack_cmd
from accel.cli import status as status_cmd
from accel.cli import sync as sync_cmd
from accel.errors import EXIT_INTERRUPTED, AccelError, UsageError, storage_error
from accel.workspace import Workspace

app = typer.Typer(
    name="accel",
    help=(
        "Workspace state for PyTorch training: launch runs, keep their checkpoints, logs "
        "and cache in .accelerate/, configure, report, clean and sync them."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        _output.raw(f"accel {__version__}")
        raise typer.Exit(0)


def _show_completion(ctx: typer.Context, value: bool) -> None:
    if value:
        from accel.cli import _completion

        shell = _completion.pick(_app.word_after(ctx, "--show-completion"), os.environ)
        _output.raw(_completion.script(shell))
        raise typer.Exit(0)


def _install_completion(ctx: typer.Context, value: bool) -> None:
    if value:
        from accel.cli import _completion

        shell = _completion.pick(_app.word_after(ctx, "--install-completion"), os.environ)
        path = _completion.install(shell)
        _output.raw(f"{shell} completion installed in {path}; it works in new shells")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    workspace: str | None = typer.Option(
        None,
        "--workspace",
        "-w",
        metavar="PATH",
        envvar="ACCEL_WORKSPACE",
        help="The .accelerate folder to use (default: nearest one, like git).",
        show_envvar=True,
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    show_completion: bool = typer.Option(
        False,
        "--show-completion",
        callback=_show_completion,
        is_eager=True,
        help="Print the completion script; --show-completion bash, zsh or fish picks the shell "
        "(default: this one).",
    ),
    install_completion: bool = typer.Option(
        False,
        "--install-completion",
        callback=_install_completion,
        is_eager=True,
        help="Install completion; --install-completion bash, zsh or fish picks the shell "
        "(default: this one).",
    ),
) -> None:
    source = ctx.get_parameter_source("workspace")
    if source is not None and source.name == "ENVIRONMENT":
        workspace = None  # discovery reads ACCEL_WORKSPACE itself, and refuses a blank one
    elif workspace is not None and not workspace.strip():
        raise UsageError("--workspace is empty: give a path, or leave the option out")
    _app.options(ctx).workspace = workspace
    from accel.config.resolve import env_warnings

    for line in env_warnings(os.environ):  # here, once per command; workers never print it
        _output.warn(line)


app.add_typer(config_cmd.app, name="config")
app.command("status")(status_cmd.status)
app.command("launch", cls=launch_cmd.LaunchCommand, context_settings=launch_cmd.CONTEXT)(
    launch_cmd.launch
)
app.add_typer(runs_cmd.app, name="runs")
app.command("logs", cls=_help.Command)(runs_cmd.logs)
app.command("stack", cls=_help.Command)(stack_cmd.stack)
app.command("env")(env_cmd.env)
app.command("clean")(clean_cmd.clean)
app.add_typer(sync_cmd.app, name="sync")
app.add_typer(checkpoints_cmd.app, name="checkpoints")
app.add_typer(cache_cmd.app, name="cache")
app.command("help", cls=_help.Command)(_help.help_command)


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command ``argv`` names: typer builds every command's
    parameters before it runs one (about 20 ms of each start-up). The whole app where
    that is not plain: no command word, an unknown one (typer's did-you-mean needs the
    others), `help`, or an option before the word other than --workspace."""
    words = iter(argv)
    for word in words:
        if word in ("-w", "--workspace"):
            next(words, None)
        elif word.startswith(("--workspace=", "-w")):
            continue
        elif word.startswith("-") or word == "help":
            return app
        else:
            break
    else:
        return app
    commands = [c for c in app.registered_commands if c.name == word]
    groups = [g for g in app.registered_groups if g.name == word]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def main(argv: list[str] | None = None, *, options: _app.GlobalOptions | None = None) -> int:
    """Run the CLI and return its exit code (``options``: the caller's, to read back)."""
    _open_standard_fds()
    if hasattr(signal, "SIGXFSZ"):  # a file-size limit: EFBIG and one line, not a core dump
        with contextlib.suppress(ValueError):  # not the main thread: leave it as it is
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from accel.cli import _completion

    argv = sys.argv[1:] if argv is None else list(argv)
    if _completion.requested(os.environ):
        _completion.prepare()
        command = typer.main.get_command(app)
    else:
        command = typer.main.get_command(_app_for(argv))
    if options is None:
        options = _app.GlobalOptions()
    options.argv = argv
    try:
        result = command.main(args=argv, prog_name="accel", standalone_mode=False, obj=options)
    except typer.exceptions.Exit as exc:
        return int(exc.exit_code)
    except (typer.exceptions.Abort, KeyboardInterrupt):
        _output.error("interrupted")
        return EXIT_INTERRUPTED
    except typer.exceptions.TyperException as exc:
        return _usage_error(exc, argv, command)
    except AccelError as exc:
        _output.error(_redacted(str(exc), argv))  # messages quote values: URLs, ranks' errors
        return exc.exit_code
    except SystemExit as exc:
        if exc.code != 1 or not isinstance(exc.__context__, BrokenPipeError):
            raise
        # rich's and typer's answer to a reader that went away: exit 1. accel's own output
        # drops the rest and keeps the command's code (_output.gone); only help is printed
        # by them, and `accel --help | head -1` failed a `set -o pipefail` script. Help's
        # code: 0 when asked for, 2 when shown for a command given without its arguments.
        _output.gone(sys.stdout)
        asked = argv[:1] == ["help"] or "--help" in argv or "-h" in argv
        return 0 if asked else 2
    except OSError as exc:  # the filesystem refused somewhere no AccelError was made for it
        if exc.errno is None:
            return _crash()
        _output.error(_redacted(str(storage_error(exc, "use", exc.filename)), argv))
        return 1
    except Exception:  # noqa: BLE001 - the one place unexpected errors are reported
        return _crash()
    return result if isinstance(result, int) else 0


def _usage_error(exc: typer.exceptions.TyperException, argv: list[str], root: object) -> int:
    """Bad flags or arguments: one line naming the problem and where help is."""
    code = int(getattr(exc, "exit_code", 2))
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" or not hasattr(exc, "format_message"):
        exc.show()  # type: ignore[attr-defined]
        return code
    path = ctx.command_path if ctx is not None else _command_path(root, argv)
    where = f" (see '{path} --help')"
    message = (
        _global_option_after(exc)
        or _script_option_first(exc, argv)
        or exc.format_message().rstrip(".")
    )
    _output.error(_redacted(f"{message}{where}", argv))  # click quotes the arguments
    return code


def _command_path(root: object, argv: list[str]) -> str:
    """The command ``argv`` names, as its context's ``command_path`` would: click's parser
    raises an option missing its value, or given one it takes none of, before it makes
    that context."""
    path, command = ["accel"], root
    words = iter(argv)
    for word in words:
        if word in ("-w", "--workspace"):
            next(words, None)  # the workspace, not a command
        elif not word.startswith("-"):
            found = getattr(command, "commands", {}).get(word)  # a group's, by name
            if found is None:
                break  # an argument: the command is named
            path.append(word)
            command = found
    return " ".join(path)


def _global_option_after(exc: typer.exceptions.TyperException) -> str | None:
    """``accel status --workspace X``: accel's own option after a command, as git's
    ``-C``; the line shows where it goes."""
    ctx = getattr(exc, "ctx", None)
    option = str(getattr(exc, "option_name", ""))
    if type(exc).__name__ != "NoSuchOption" or ctx is None or option not in ("--workspace", "-w"):
        return None
    return (
        f"no such option: {option}: it is accel's own and goes before the command: "
        f"accel --workspace PATH {ctx.command_path.partition(' ')[2]} ..."
    )


def _script_option_first(exc: typer.exceptions.TyperException, argv: list[str]) -> str | None:
    """``accel launch --steps 10 train.py``: the script's own option given before the
    script, where click would offer launch's options that merely share letters (``--tee,
    --tpu``). None for a typo of one of launch's own options, or when no script follows."""
    import difflib

    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ != "NoSuchOption" or ctx is None or ctx.info_name != "launch":
        return None
    option = str(getattr(exc, "option_name", ""))
    own = [o for param in ctx.command.params for o in param.opts if o.startswith("--")]
    if difflib.get_close_matches(option, own, n=1, cutoff=0.8):
        return None  # --nproc-per-nod: click's "Did you mean" is the help
    at = next((i for i, a in enumerate(argv) if a == option or a.startswith(option + "=")), None)
    rest = argv[at + 1 :] if at is not None else []
    script = next((a for a in rest if a.endswith(".py") and not a.startswith("-")), None)
    if script is None:
        return None
    return (
        f"no such option: {option}: accel launch's options go before the script, the "
        f"script's own after it: accel launch [OPTIONS] {script} {option} ..."
    )


def _redacted(text: str, argv: list[str]) -> str:
    """An error line as it may be shown: the secret values of this process's environment
    (``ACCEL_LAUNCH_ENV``'s variables too) and command line scrubbed wherever the message
    quotes them, then redacted (first: a secret with a space is then still found whole)."""
    from accel.env.probe import launch_env_pairs

    secrets = secret_values(os.environ, launch_env_pairs(os.environ) or {}, argv=argv)
    return redact_text(scrub(text, secrets))


def _crash() -> int:
    from accel.crashlog import crash_text, write_crash_log

    text = crash_text(__version__, sys.argv, traceback.format_exc(), os.environ)
    try:
        where = f"the traceback is in {write_crash_log(text, _workspace_logs(), os.environ)}"
    except OSError as err:
        where = f"the traceback could not be saved ({err.strerror or err})"
    exc = sys.exc_info()[1]
    message = _redacted(f"unexpected {type(exc).__name__}: {exc}", sys.argv)
    _output.error(f"{message}; {where} (please report it)")
    return 1


def _workspace_logs() -> Path | None:
    try:
        ws = Workspace.discover()
        return ws.logs_dir if ws.identify() else None  # never a folder accel did not make
    except Exception:  # noqa: BLE001 - a broken workspace must not hide the crash
        return None


def run() -> None:
    """Console-script entry point."""
    options = _app.GlobalOptions()
    code = main(options=options)
    if options.fast_exit:
        _exit_now(code)
    sys.exit(code)


def _open_standard_fds() -> None:
    """A command started with stdin, stdout or stderr closed (``<&-``, some daemons) gets
    /dev/null there: else the first file or socket accel opens takes that descriptor and a
    child's stdin (or output) lands on it (the preload template's socket was replaced by
    /dev/null and the launch died with a traceback)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)  # as a standard stream is: the workers get it
    # Python made no stream for a descriptor closed at its start (sys.stdin is None): the
    # prompts' isatty() and every print crashed. Each gets the descriptor, now /dev/null.
    # A name that is not UTF-8 (a file of someone else's, kept as surrogates) is printed
    # escaped, never a UnicodeEncodeError, whatever the locale's encoding is.
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115
        elif fd and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")


def _exit_now(code: int) -> None:
    """Skip the interpreter's teardown of torch (a few hundred ms) after a clean run.

    The command has closed every file and released every lock by now. Only for the real
    executable: under a test runner's captured stdout, exit normally.
    """
    stdout = sys.stdout
    if stdout is not sys.__stdout__ or stdout is None or os.environ.get("ACCEL_NO_FAST_EXIT"):
        return
    for stream in (stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader went away: the run's code still stands
            _output.gone(stream)
    os._exit(code)
