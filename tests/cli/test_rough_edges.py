"""The smaller rough edges of a newcomer's tour, each as a user meets it."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.workspace import Workspace


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _rows(out: str) -> dict[str, str]:
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line}


def test_views_show_values_as_the_docs_and_the_file_write_them(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(_cli(capsys, "config", "show")[1])
    assert rows["launch.stop_grace_period"] == "10s" and rows["logs.rotate_max_bytes"] == "10MiB"
    assert rows["launch.use_cpu"] == "false" and rows["launch.hang_timeout"] == "null"
    assert rows["store.lock_timeout"] == "1m"
    (project / "train.py").write_text("print('hi')\n")
    code, out, _ = _cli(capsys, "launch", "--dry-run", "train.py")
    plan = _rows(out.split("config", 1)[1])
    assert code == 0 and plan["launch.use_cpu"] == "false" and "False" not in out
    assert plan["launch.stop_grace_period"] == "10s" and plan["logs.rotate_max_bytes"] == "10MiB"
    assert _cli(capsys, "config", "get", "logs.rotate_max_bytes")[1] == "10MiB\n"


def test_config_set_names_the_key_and_get_of_a_section_lists_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "config", "set", "launch.num_processes", "two")
    assert code == 2
    assert err.strip() == (
        "error: invalid value for launch.num_processes: expected an integer from 1 to 1024 "
        "or 'auto', got 'two'"
    )
    code, out, err = _cli(capsys, "config", "get", "launch")
    assert code == 0 and "did you mean" not in err
    assert _rows(out)["launch.num_processes"] == "1" and "checkpoints." not in out
    code, _, err = _cli(capsys, "config", "set", "launch", "1")
    assert code == 2 and "'launch' is a section, not a key" in err and "did you mean" not in err


def test_a_run_id_part_that_matches_several_runs_says_so(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace(project / ".accelerate").ensure()
    for run_id in ("20261129-100000-aaaaaa", "20261129-110000-bbbbbb"):
        (ws.runs_dir / run_id).mkdir()
        (ws.runs_dir / run_id / "run.json").write_text(json.dumps({"status": "succeeded"}))
    code, _, err = _cli(capsys, "logs", "2026")
    assert code == 2
    assert err.strip() == (
        "error: run '2026' is ambiguous: it matches 2 runs (20261129-110000-bbbbbb, "
        "20261129-100000-aaaaaa); give more of the id"
    )
    assert "unknown run 'zzz': see `accel runs`" in _cli(capsys, "logs", "zzz")[2]


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_launch_into_head_exits_with_the_runs_code(project: Path, accel_exe: list[str]) -> None:
    (project / "many.py").write_text("for i in range(3000):\n    print('line', i, flush=True)\n")
    exe = " ".join(accel_exe)
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{exe} launch many.py 2>&1 | head -1"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert done.returncode == 0, done.stderr
    (run,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    assert json.loads((run / "run.json").read_text())["exit_code"] == 0


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "code"),
    [(["--help"], 0), (["help", "launch"], 0), (["runs", "plot", "-h"], 0), ([], 2), (["sync"], 2)],
)
def test_help_into_a_closed_pipe_exits_with_helps_code(
    project: Path, accel_exe: list[str], args: list[str], code: int
) -> None:
    """`accel --help | head -1` exited 1 (rich's and typer's code for a closed pipe), so a
    `set -o pipefail` script failed; every other output keeps the command's code."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before accel writes a byte
    try:
        done = subprocess.run(
            [*accel_exe, *args],
            cwd=project,
            stdout=write,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=50,
        )
    finally:
        os.close(write)
    assert done.returncode == code and done.stderr == "", done.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["--preload", "--no-preload"])
def test_a_launch_with_stdin_closed_runs(project: Path, accel_exe: list[str], mode: str) -> None:
    # `accel launch --preload train.py <&-`: the template's socket took fd 0, the worker's
    # stdin (/dev/null) replaced it, and the launch died with the template's traceback
    (project / "s.py").write_text("import sys\nprint('ran', sys.stdin.read() == '')\n")
    done = subprocess.run(
        [*accel_exe, "launch", mode, "s.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=100,
        preexec_fn=lambda: os.close(0),
    )
    assert done.returncode == 0 and "[rank0] ran True" in done.stdout, done.stderr


def _clean_prompt(accel_exe: list[str], project: Path, answer: bytes | None) -> int:
    """Answer the clean prompt with ``answer``, or with SIGINT (Ctrl-C) when None."""
    ws = Workspace(project / ".accelerate").ensure()
    old_run = ws.runs_dir / "20200101-000000-aaaaaa"  # a run accel recorded, 3 days old
    old_run.mkdir(parents=True)
    (old_run / "run.json").write_text(json.dumps({"id": old_run.name, "status": "succeeded"}))
    old = time.time() - 3 * 86400
    for path in (old_run / "run.json", old_run):
        os.utime(path, (old, old))
    main_fd, sub_fd = pty.openpty()
    # accel starts with SIGINT at its default, as from a terminal's shell: a runner started
    # by `cmd &` in a script (a CI wrapper, nohup) ignores SIGINT, its children inherit
    # that, and Python then installs no KeyboardInterrupt (Ctrl-C cannot reach such a
    # process from a terminal either). The handler set here is reset to the default by exec.
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [*accel_exe, "clean", "--older-than", "1d"], cwd=project, stdin=sub_fd,
            stdout=sub_fd, stderr=sub_fd,
            env={**os.environ, "TERM": "dumb", "PYTHONFAULTHANDLER": "1"},
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, ignored)
    os.close(sub_fd)
    seen, deadline = b"", time.monotonic() + 40
    try:
        while b"Remove" not in seen:
            assert time.monotonic() < deadline, seen
            if select.select([main_fd], [], [], 0.5)[0]:
                seen += os.read(main_fd, 4096)
        if answer is None:
            proc.send_signal(signal.SIGINT)
        else:
            os.write(main_fd, answer)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # where it waits: faulthandler prints every thread
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=30)
            while select.select([main_fd], [], [], 1)[0]:
                try:
                    seen += os.read(main_fd, 65536)
                except OSError:  # the other end is closed
                    break
            raise AssertionError(
                f"no exit 30 s after the answer: {seen.decode(errors='replace')}"
            ) from None
    finally:
        proc.kill()
        os.close(main_fd)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_end_of_input_at_the_clean_prompt_declines_with_exit_1(
    project: Path, accel_exe: list[str]
) -> None:
    assert _clean_prompt(accel_exe, project, b"\x04") == 1  # Ctrl-D: end of input
    assert (project / ".accelerate" / "logs" / "runs" / "20200101-000000-aaaaaa").exists()


@pytest.mark.slow
@pytest.mark.timeout(90)  # the answer's 30 s, and a stack dump if it hangs
def test_ctrl_c_at_the_clean_prompt_is_still_an_interrupt(
    project: Path, accel_exe: list[str]
) -> None:
    assert _clean_prompt(accel_exe, project, None) == 130


INTERRUPT_WHILE_LOADING = """
import builtins, os, signal, sys

_import = builtins.__import__


def _interrupting(name, *args, **kwargs):
    if name == "typer" and "typer" not in sys.modules:  # the command's modules load
        open(os.environ["TEST_INTERRUPT_MARK"], "w").close()
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the user's arrives
    return _import(name, *args, **kwargs)


builtins.__import__ = _interrupting
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_ctrl_c_while_the_command_loads_is_one_line_and_130(
    project: Path, accel_exe: list[str], tmp_path: Path
) -> None:
    """A Ctrl-C in the command's first ~0.1 s (it loads typer, rich and the commands)
    printed Python's traceback of the import it cut short."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(INTERRUPT_WHILE_LOADING)
    mark = tmp_path / "interrupted"
    env = {**os.environ, "PYTHONPATH": str(hook), "TEST_INTERRUPT_MARK": str(mark)}
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell's child
    try:
        done = subprocess.run(
            [*accel_exe, "config", "show"], cwd=project, env=env, capture_output=True,
            text=True, timeout=50,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert mark.exists()  # the interrupt came while the command loaded
    assert (done.returncode, done.stderr, done.stdout) == (130, "error: interrupted\n", "")


def test_the_sync_progress_bar_speaks_mib_per_second_like_its_summary() -> None:
    from rich.progress import Progress

    from accel.cli._output import speed_column

    column = speed_column()
    progress = Progress(column)
    task_id = progress.add_task("pushing", total=100)
    task = progress.tasks[0]
    assert task.id == task_id
    task.finished_speed = 3 * 1024**2
    assert column.render(task).plain == "3.0 MiB/s"
