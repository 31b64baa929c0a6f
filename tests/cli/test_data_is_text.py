"""Data is text: what accel prints from data is never rich markup nor terminal control.

Run records, tags, cache keys and config values written by a hostile pull (or a typo)
reach the screen as the characters they are: brackets shown as brackets, escape
sequences (clear the screen, set the title), C1 controls and bidi overrides removed.
Both paths: plain (stdout not a terminal) and rich on a terminal, forced here the way a
user's terminal forces it (FORCE_COLOR, TERM), and once through a pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from accel_runner import cli

import run_helpers
from accel.cli import _output
from accel.workspace import Workspace
from run_helpers import write_run

RUN_ID = "20261129-100000-aaaaaa"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202egnp.exe"
ARGV = ["accel", "launch", "train.py", "x=[/]", "trainer.devices=[0]", HOSTILE, ":thumbs_up:"]
HOSTILE_PARTS = ("\x1b]", "\x1b[2J", "\x07", "\x9b", "\u202e")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colours rich itself writes on a terminal


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """stdout taken for a colour terminal: the console accel builds, forced as a user's
    FORCE_COLOR forces it (its output still goes to the captured stdout)."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(_output, "is_terminal", lambda: True)
    _output.console.cache_clear()
    yield
    _output.console.cache_clear()


@pytest.fixture(params=["piped", "terminal"])
def screen(request: pytest.FixtureRequest) -> None:
    """Each test taking it runs twice: stdout piped, then a terminal."""
    if request.param == "terminal":
        request.getfixturevalue("terminal")


def assert_text(shown: str, *expected: str) -> None:
    """``shown`` holds each of ``expected`` and no control character but newlines (and
    the colours rich writes on a terminal)."""
    plain = SGR.sub("", shown)
    bad = sorted({c for c in plain if c not in "\n\t" and not c.isprintable()})
    assert not bad, (bad, shown)
    for part in ("\u202e", "\x9b"):
        assert part not in plain, shown
    for part in expected:
        assert part in plain, (part, shown)


def hostile_run(ws: Workspace) -> Path:
    return write_run(
        ws,
        RUN_ID,
        {
            "command": ARGV,
            "name": "n[bold]x" + HOSTILE,
            "error": {"rank": 1, "type": "ValueError", "message": "bad [/] " + HOSTILE},
        },
    )


EXPECTED_RUN = ("x=[/]", "trainer.devices=[0]", "]0;pwned[2J31mgnp.exe", ":thumbs_up:")


def test_runs_show_prints_argv_as_text_when_piped(ws: Workspace) -> None:
    hostile_run(ws)
    result = cli("runs", "show")
    assert result.exit_code == 0, result.output
    assert_text(result.stdout, *EXPECTED_RUN, "n[bold]x", "ValueError: bad [/] ]0;pwned")
    assert f"run {RUN_ID} (n[bold]x" in result.stdout  # markup of accel's own is gone


def test_runs_show_prints_argv_as_text_on_a_terminal(ws: Workspace, terminal: None) -> None:
    hostile_run(ws)
    result = cli("runs", "show")
    assert result.exit_code == 0, result.output
    assert f"\x1b[1mrun {RUN_ID}\x1b[0m" in result.stdout  # the terminal path: markup works
    assert_text(result.stdout, *EXPECTED_RUN, "n[bold]x", "ValueError: bad [/] ]0;pwned")


def test_runs_lists_a_hostile_name_as_text(ws: Workspace, screen: None) -> None:
    hostile_run(ws)
    result = cli("runs")
    assert result.exit_code == 0, result.output
    assert_text(result.stdout, "n[bold]x]0;pwned")
    assert json.loads(cli("runs", "--json").stdout)[0]["name"] == "n[bold]x" + HOSTILE


@pytest.mark.slow
def test_the_installed_accel_on_a_pseudo_terminal(ws: Workspace, project: Path) -> None:
    hostile_run(ws)
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("FORCE_COLOR", None)
    env.pop("NO_COLOR", None)
    try:
        proc = subprocess.run(
            [*run_helpers.accel_command(), "runs", "show"],
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=follower,
            env=env,
            timeout=60,
        )
    finally:
        os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    text = shown.decode("utf-8", errors="replace").replace("\r\n", "\n")
    assert proc.returncode == 0, text
    assert "\x1b[1m" in text, text  # rich on a terminal
    assert_text(text, *EXPECTED_RUN)


def hostile_checkpoint(ws: Workspace) -> str:
    import torch

    tag = "[red]best[/red] " + HOSTILE + "\nfake row"
    ws.checkpoints.save({"w": torch.zeros(2)}, 7, tag=tag)
    return tag


def test_a_checkpoint_tag_is_shown_as_text(ws: Workspace, screen: None) -> None:
    tag = hostile_checkpoint(ws)
    listed = cli("checkpoints", "list")
    assert listed.exit_code == 0, listed.output
    assert_text(listed.stdout, "[red]best[/red] ]0;pwned[2J31mgnp.exe fake row")
    shown = cli("checkpoints", "show", "7")
    assert shown.exit_code == 0, shown.output
    assert_text(shown.stdout, "[red]best[/red] ]0;pwned[2J31mgnp.exe")
    data = json.loads(cli("checkpoints", "list", "--json").stdout)
    assert data["checkpoints"][0]["tag"] == tag  # --json keeps the value as it is


def test_a_cache_key_is_shown_as_text(ws: Workspace, screen: None) -> None:
    # keys refuse C0 and DEL (accel.store.entry), but brackets, C1 and bidi are names
    key = "data/[bold]x[/]\x9b2J\u202egnp"
    ws.cache.put(key, b"payload")
    result = cli("cache", "list")
    assert result.exit_code == 0, result.output
    assert_text(result.stdout, "data/[bold]x[/]2Jgnp")


def test_a_config_value_is_shown_as_text(ws: Workspace, screen: None) -> None:
    value = "[bold]x[/] " + HOSTILE
    ws.config_file.write_text(f"launch:\n  rdzv_id: {json.dumps(value)}\n")
    for args in (("config", "show"), ("config", "get", "launch.rdzv_id")):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert_text(result.stdout, "[bold]x[/] ]0;pwned[2J31mgnp.exe")


def test_an_error_line_quoting_data_is_text(ws: Workspace) -> None:
    hostile_run(ws)
    result = cli("runs", "show", "[bold]" + HOSTILE)
    assert result.exit_code == 2
    assert_text(result.stderr, "unknown run '[bold]")


@pytest.mark.parametrize("command", ["validate", "import"])
def test_an_error_line_naming_a_file_with_a_newline_is_one_line(
    ws: Workspace, command: str
) -> None:
    result = cli("config", command, "a\nerror: fake")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: a\\nerror: fake: no such file"]


def test_a_warning_naming_a_variable_with_a_newline_is_one_line(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_X\nerror: fake", "1")
    result = cli("status")
    assert result.exit_code == 0, result.output
    assert [line for line in result.stderr.splitlines() if "ACCEL_X" in line or "fake" in line] == [
        "warning: environment variable ACCEL_X\\nerror: fake is not one accel reads, so it is "
        "ignored (`accel config show` lists the keys)"
    ]


def test_a_hostile_file_name_in_the_workspace_is_shown_as_text(ws: Workspace, screen: None) -> None:
    (ws.path / ("[bold]odd" + HOSTILE + "\nfake row")).write_text("x")
    for args in (("status",), ("clean", "--dry-run")):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert_text(result.stdout, "[bold]odd]0;pwned[2J31mgnp.exe")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [False, True])
def test_worker_output_keeps_its_colours_and_no_other_escape(
    tty: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``accel launch`` and ``accel logs`` show a program's own output: colours stay,
    what clears the screen, sets the title or moves the cursor does not."""
    from accel.cli._worker_console import WorkerConsole
    from accel.runs.streams import NL, STDOUT, Piece

    monkeypatch.setenv("NO_COLOR", "1")  # no rank colours: what is left is the worker's
    out, err = (_Tty(), _Tty()) if tty else (io.StringIO(), io.StringIO())
    console = WorkerConsole(1, stdout=out, stderr=err)
    line = "\x1b[31mred\x1b[0m \x1b]0;pwned\x07\x1b[2J\x1b[Aup\x9b2J\x08done\tok".encode()
    console(0, STDOUT, Piece(line, NL, True, False))
    console.end_line()
    assert out.getvalue() == "[rank0] \x1b[31mred\x1b[0m updone\tok\n"


def test_a_progress_label_is_text() -> None:
    """``checkpoints export -o 'x[/].safetensors'`` names its bar after the file."""
    from rich.console import Console
    from rich.progress import Progress, TextColumn

    screen = io.StringIO()
    fake = Console(file=screen, force_terminal=True, color_system=None, width=80)
    progress = Progress(TextColumn("{task.description}"), console=fake)
    with progress:
        _output._Bar(progress).stage("writing x[/]" + HOSTILE, None)
        progress.refresh()
    shown = screen.getvalue()  # rich's own controls (erase the line) are in it
    assert "writing x[/]]0;pwned" in shown
    assert [part for part in HOSTILE_PARTS if part in shown] == []


def test_launch_dry_run_shows_the_command_line_as_text(
    ws: Workspace, project: Path, screen: None
) -> None:
    (project / "train.py").write_text("")
    result = cli("launch", "--dry-run", "train.py", "x=[/]", "trainer.devices=[0]", HOSTILE)
    assert result.exit_code == 0, result.output
    assert_text(result.stdout, "train.py x=[/] trainer.devices=[0] ]0;pwned[2J31mgnp.exe")


def test_a_listing_too_long_for_a_screen_is_plain_columns_on_a_terminal(
    terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # 20,000 rows of `accel cache list` took rich 8 s and 150 MB on a terminal
    rows = [[f"key/{i}", "json", "1 KiB"] for i in range(1001)]  # past RICH_ROWS
    _output.table("entries", ["key", "kind", "size"], rows)
    shown = capsys.readouterr().out
    assert "│" not in shown and "━" not in shown
    assert shown.splitlines()[2].split() == ["key/0", "json", "1", "KiB"]
    _output.table("entries", ["key", "kind", "size"], rows[:3])  # a screenful: rich's
    assert "│" in capsys.readouterr().out
