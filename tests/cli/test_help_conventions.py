"""Every command's help reads like one program's: the same placeholders for the same
kind of value, written the same way, and ``accel help X`` is ``accel X --help``.

Walks the whole command tree, so a new command or option is held to the conventions
without a line here (the table of known placeholders below only pins the names).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from accel_runner import cli, runs_without_heavy_imports
from rich.text import Text

from accel.cli.main import app

# One placeholder: NAME, or names joined by = : | (KEY=VALUE, HOST:PORT, TRUE|FALSE).
METAVAR = r"[A-Z][A-Z0-9_]*(?:[=:|][A-Z][A-Z0-9_]*)*"
USAGE_WORD = re.compile(rf"(?:{METAVAR}|\[{METAVAR}\])(?:\.\.\.)?")

# The placeholder of each kind of value, wherever an option of that kind appears.
KNOWN = {
    "--older-than": "DURATION",
    "--since": "DURATION",
    "--hang-timeout": "DURATION",
    "--stop-grace-period": "DURATION",
    "--max-size": "SIZE",
    "--workspace": "PATH",
    "--config-file": "PATH",
    "--output": "PATH",
    "--limit": "N",
    "--keep-last": "N",
    "--max-restarts": "N",
    "--nproc-per-node": "N",
    "--num-processes": "N",
    "--env": "KEY=VALUE",
    "--storage-option": "KEY=VALUE",
    "--rdzv-endpoint": "HOST:PORT",
}
ARGUMENTS = {
    ("launch",): ["SCRIPT", "[ARGS]..."],
    ("logs",): ["[RUN]"],
    ("stack",): ["[RUN]"],
    ("runs", "show"): ["[RUN]"],
    ("runs", "plot"): ["[RUN]..."],
    ("sync", "push"): ["URL"],
    ("sync", "pull"): ["URL"],
    ("config", "get"): ["KEY"],
    ("config", "set"): ["KEY", "VALUE"],
    ("config", "import"): ["PATH"],
    ("config", "validate"): ["[PATH]"],
    ("cache", "rm"): ["[KEY]"],
    ("checkpoints", "show"): ["[STEP]"],
    ("checkpoints", "export"): ["[STEP]", "[PATH]"],
}


def _walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from _walk(sub, (*path, name))


COMMANDS = dict(_walk(typer.main.get_command(app), ()))
IDS = [" ".join(("accel", *path)) for path in COMMANDS]


@functools.cache
def _help(*path: str) -> str:
    """``accel PATH --help`` (rendered once: the tests below read it several times)."""
    done = cli(*path, "--help")
    assert done.exit_code == 0 and not done.stderr, done.stderr
    return done.stdout


def _params(path: tuple[str, ...]) -> list[tuple[Any, str]]:
    """The command's shown parameters, each with the placeholder its help shows."""
    command = COMMANDS[path]
    ctx = typer.Context(command, info_name=path[-1] if path else "accel")
    shown = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or getattr(param, "is_flag", False):
            continue
        if param.param_type_name == "argument":
            shown.append((param, param.metavar or param.name))
        else:
            shown.append((param, param.make_metavar(ctx)))
    return shown


def test_the_walk_sees_every_command() -> None:
    assert {"launch", "logs", "help", "runs plot", "sync push", "config set"} <= {
        " ".join(path) for path in COMMANDS
    }


@pytest.mark.parametrize("path", list(COMMANDS), ids=IDS)
def test_usage_line_uses_uppercase_placeholders(path: tuple[str, ...]) -> None:
    text = _help(*path)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    words = usage.split("Usage:", 1)[1].split()
    assert words[: len(path) + 1] == ["accel", *path], usage
    odd = [word for word in words[len(path) + 1 :] if not USAGE_WORD.fullmatch(word)]
    assert not odd, f"{usage.strip()}: {odd}"
    if path in ARGUMENTS:
        assert words[len(path) + 2 :] == ARGUMENTS[path], usage


@pytest.mark.parametrize("path", list(COMMANDS), ids=IDS)
def test_no_type_placeholders_anywhere(path: tuple[str, ...]) -> None:
    text = _help(*path)
    assert not re.findall(r"<[^<>\s]+>", text), text  # typer's <str>, <path>, <int>
    assert not re.findall(r"\{\w+\}", text), text  # a required argument as {script}
    assert not re.findall(r"\[x?[<>]=?", text), text  # click's range, `N [x>=0]`


@pytest.mark.parametrize("path", list(COMMANDS), ids=IDS)
def test_every_placeholder_is_conventional(path: tuple[str, ...]) -> None:
    for param, metavar in _params(path):
        where = f"accel {' '.join(path)} {param.opts[0]}"
        assert re.fullmatch(METAVAR, metavar), f"{where}: {metavar!r}"
        if getattr(param.type, "name", "") == "path":
            assert metavar == "PATH", f"{where}: a path is PATH, not {metavar!r}"
        for opt in param.opts:
            if opt in KNOWN:
                assert metavar == KNOWN[opt], f"{where}: {KNOWN[opt]}, not {metavar!r}"


def test_the_known_placeholders_are_all_in_use() -> None:
    used = {opt for path in COMMANDS for param, _ in _params(path) for opt in param.opts}
    assert set(KNOWN) <= used, set(KNOWN) - used
    assert set(ARGUMENTS) <= set(COMMANDS), set(ARGUMENTS) - set(COMMANDS)


@pytest.mark.parametrize("path", list(COMMANDS), ids=IDS)
def test_every_option_name_is_shown_whole(path: tuple[str, ...]) -> None:
    """In an 80-column terminal (the runner's width), no name is cut to `--machine-r…`."""
    words = set(re.split(r"[\s,]+", _help(*path)))
    for param in COMMANDS[path].params:
        if not getattr(param, "hidden", False) and param.param_type_name == "option":
            for opt in (*param.opts, *param.secondary_opts):
                assert opt in words, f"accel {' '.join(path)}: {opt}"


@pytest.mark.parametrize("path", list(COMMANDS), ids=IDS)
def test_help_texts_lose_nothing_to_markup(path: tuple[str, ...]) -> None:
    """Help is rendered as rich markup: a ``[bash|zsh|fish]`` in it would vanish."""
    command = COMMANDS[path]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in params]
    for text in texts:
        assert Text.from_markup(text).plain == text, text


@pytest.mark.parametrize("path", list(COMMANDS), ids=IDS)
def test_help_command_prints_the_same_help(path: tuple[str, ...]) -> None:
    done = cli("help", *path)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == _help(*path) and not done.stderr


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("nosuch",), "error: No such command 'nosuch' (see 'accel --help')"),
        (("runs", "nosuch"), "error: No such command 'nosuch' (see 'accel runs --help')"),
        (("lauch",), "error: No such command 'lauch'. Did you mean 'launch'"),
        (
            ("launch", "train.py"),
            "error: 'accel launch' has no command 'train.py' (see 'accel launch --help')",
        ),
    ],
)
def test_help_for_an_unknown_command_is_one_line_and_exit_2(
    args: tuple[str, ...], line: str
) -> None:
    done = cli("help", *args)
    assert done.exit_code == 2 and not done.stdout
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(line), done.stderr


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_help_imports_neither_torch_nor_numpy() -> None:
    done = runs_without_heavy_imports(("help",), ("help", "launch"), ("help", "runs", "plot"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("launch", "-n"), "error: Option '-n' requires an argument (see 'accel launch --help')"),
        (
            ("clean", "--older-than", "7d", "--keep-last"),
            "error: Option '--keep-last' requires an argument (see 'accel clean --help')",
        ),
        (
            ("runs", "show", "--json=x"),
            "error: Option '--json' does not take a value (see 'accel runs show --help')",
        ),
        (("-w",), "error: Option '-w' requires an argument (see 'accel --help')"),
        (
            ("-w", "runs", "status", "--json=1"),
            "error: Option '--json' does not take a value (see 'accel status --help')",
        ),
    ],
)
def test_an_option_missing_its_value_or_given_one_says_where_help_is(
    args: tuple[str, ...], line: str
) -> None:
    """click's parser raises these two before a command's context exists, so the line
    named no help to read, where every other usage error names it."""
    done = cli(*args)
    assert done.exit_code == 2 and not done.stdout, done.stdout
    assert done.stderr.splitlines() == [line], done.stderr


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("runs", "--limit"), "--limit"),
        (("logs", "--tail"), "--tail"),
        (("clean", "--keep-last"), "--keep-last"),
    ],
)
@pytest.mark.parametrize("value", ["-1", "x", "1.5", "\u0663", ""])
def test_a_count_is_refused_in_one_line_as_every_count_is(
    args: tuple[str, ...], flag: str, value: str
) -> None:
    """`--limit -1` said "-1 is not in the range x>=0" and `--limit x` "'x' is not a valid
    int range", where `clean --keep-last` says what it expects."""
    done = cli(*args, value)
    assert done.exit_code == 2 and not done.stdout, done.stdout
    assert done.stderr.splitlines() == [
        f"error: invalid {flag} {value!r}: expected a whole number >= 0"
    ], done.stderr
