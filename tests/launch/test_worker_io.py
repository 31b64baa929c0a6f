"""Worker output as the script wrote it: partial lines, progress bars, two streams,
``__file__`` and ``sys.argv`` as under torchrun, and ``--no-python`` programs."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipapp
from collections.abc import Iterator
from pathlib import Path

import pytest
from launchutil import SCRIPTS, run_folder, wait_for

from accel.config import project as config_project
from accel.workspace import Workspace

HF_CONFIGS = Path(__file__).resolve().parent.parent / "config" / "hf_configs"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))
TORCH = tuple(int(part) for part in importlib.metadata.version("torch").split(".")[:2])


class Collector:
    """A child's stdout and stderr, read as they come (nothing waits for a newline)."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out = bytearray()
        self.err = bytearray()
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _read(pipe: object, buf: bytearray) -> None:
        fd = pipe.fileno()  # type: ignore[attr-defined]
        while chunk := os.read(fd, 65536):
            buf.extend(chunk)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # torchrun would say so on every call
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=90, env=env)


@pytest.fixture
def collect(accel_exe: list[str], project: Path) -> Iterator[type[Collector]]:
    started: list[Collector] = []

    class Started(Collector):
        def __init__(self, *args: str) -> None:
            super().__init__([*accel_exe, *args], project)
            started.append(self)

    yield Started
    for c in started:
        c.kill()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_tqdm_bar_moves_on_the_console_in_the_log_and_in_logs_follow(
    collect: type[Collector], project: Path
) -> None:
    pytest.importorskip("tqdm")
    out = project / "out"
    out.mkdir()
    run = collect("launch", "-n", "1", str(SCRIPTS / "tqdm_steps.py"), str(out), "3")
    wait_for(lambda: b"before the bar" in run.out, 60, "the worker to start")
    log = run_folder(project) / "rank-0.log"
    follow = collect("logs", "--follow")
    for i in range(3):  # each update is seen everywhere before the script goes on
        state = f"| {i}/3 [".encode()
        wait_for(lambda s=state: s in run.err, 20, f"{state!r} on the console")
        wait_for(lambda s=state: s in log.read_bytes(), 20, f"{state!r} in the rank log")
        wait_for(lambda s=state: s in follow.err, 20, f"{state!r} in logs --follow")
        assert b"after the bar" not in run.out
        (out / f"go-{i}").touch()
    assert run.wait(60) == 0, run.err.decode()
    assert follow.wait(30) == 0, follow.err.decode()
    final = re.compile(rb"\[rank0\] bar: 100%\|#+\| 3/3 \[[^\r\n]*\]\n")
    assert final.search(run.err) and final.search(follow.err)
    assert b"[rank0] after the bar\n" in run.out and b"[rank0] after the bar\n" in follow.out
    text = log.read_bytes().decode()  # bytes: read_text() would turn "\r" into "\n"
    assert re.search(r"\[stderr\] bar:   0%.*\r\[stderr\] bar:  33%.*\r\[stderr\] bar:  67%", text)
    assert "before the bar\n" in text and "after the bar\n" in text


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_thousands_of_redraws_stay_out_of_the_log_and_the_console(
    collect: type[Collector], project: Path
) -> None:
    run = collect("launch", "-n", "1", str(SCRIPTS / "burst.py"))
    assert run.wait(80) == 0, run.err.decode()
    log = (run_folder(project) / "rank-0.log").read_bytes()
    # at most one redraw a second comes through (the burst takes well under that)
    assert log.count(b"\r") < 10 and log.count(b"redraw") < 10, log
    assert b"[stderr] redraw final\n" in log and b"line after the burst\n" in log
    assert run.err.count(b"redraw") < 10 and b"[rank0] redraw final\n" in run.err


@pytest.mark.slow
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
@pytest.mark.timeout(120)
def test_stdout_and_stderr_stay_apart_as_under_torchrun(
    accel_exe: list[str], project: Path
) -> None:
    script = str(SCRIPTS / "streams.py")
    theirs = run([str(TORCHRUN), "--nproc-per-node", "2", script], project)
    ours = run([*accel_exe, "launch", "-n", "2", script], project)
    assert theirs.returncode == 0 and ours.returncode == 0, ours.stderr

    def lines(text: str, word: str) -> list[str]:
        found = (re.sub(r"^\[rank\d\] ", "", line) for line in text.splitlines())
        return sorted(line for line in found if line.startswith(word))

    def printed(word: str) -> list[str]:
        return sorted(f"{word} {rank} {i}" for rank in (0, 1) for i in range(3))

    assert lines(ours.stdout, "out") == printed("out")
    assert lines(ours.stderr, "err") == printed("err")
    assert lines(ours.stdout, "err") == lines(ours.stderr, "out") == []
    # torchrun's workers share its streams and print unbuffered (python -u: the text and
    # its newline are two writes), so two ranks' lines may run into each other there:
    # compare what went to which stream, not the lines.
    for word, stream, other in (
        ("out", theirs.stdout, theirs.stderr),
        ("err", theirs.stderr, theirs.stdout),
    ):
        assert all(text in stream for text in printed(word)), stream
        assert re.search(rf"\b{word} \d", other) is None, other
    # the rank log marks stderr; each stream keeps its order (two pipes: how the two
    # interleave is the order the launcher read them, as with any two pipes)
    log = (run_folder(project) / "rank-1.log").read_text().splitlines()
    assert [line for line in log if line.startswith("out")] == [f"out 1 {i}" for i in range(3)]
    assert [line for line in log if not line.startswith("out")] == [
        f"[stderr] err 1 {i}" for i in range(3)
    ]


@pytest.mark.slow
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
@pytest.mark.timeout(120)
def test_redirects_tee_and_log_dir_are_those_of_torchrun(
    accel_exe: list[str], project: Path
) -> None:
    """``--redirects 3 --tee 0:1 --log-dir D``, a cluster script's habit (every rank to
    files, rank 0's stdout kept on the console): the same files as torchrun's, the same
    lines on the console. accel refused --log-dir and --redirects until stop 55. On a
    torch with ``--duplicate-*-filters`` (2.7+), their files too: the matching lines of
    the tee'd streams only (rank 1's ``out 1 2`` matches, but is not tee'd)."""
    script = str(SCRIPTS / "streams.py")
    flags = ["--nproc-per-node", "2", "--redirects", "3", "--tee", "0:1"]
    filtered = TORCH >= (2, 7)
    if filtered:
        flags += ["--duplicate-stdout-filters", "0 1,1 2", "--duplicate-stderr-filters", "err"]
    theirs = run([str(TORCHRUN), *flags, "--log-dir", "theirs", script], project)
    ours = run([*accel_exe, "launch", *flags, "--log-dir", "ours", script], project)
    assert theirs.returncode == 0 and ours.returncode == 0, ours.stderr

    def files(folder: str) -> dict[str, str]:
        (root,) = (project / folder).iterdir()  # <rdzv id>_<random>
        return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*.log")}

    expected = {
        f"attempt_0/{rank}/{stream}.log": "".join(f"{stream[3:]} {rank} {i}\n" for i in range(3))
        for rank in (0, 1)
        for stream in ("stdout", "stderr")
    }
    if filtered:
        expected["attempt_0/filtered_stdout.log"] = "[default0]:out 0 1\n"
        expected["attempt_0/filtered_stderr.log"] = ""
    assert files("theirs") == files("ours") == expected

    def console(text: str) -> list[str]:  # the workers' lines, without either's prefix
        lines = (re.sub(r"^\[(rank|default)\d\]:? ?", "", line) for line in text.splitlines())
        return [line for line in lines if re.fullmatch(r"(out|err) \d \d", line)]

    assert console(theirs.stdout) == console(ours.stdout) == [f"out 0 {i}" for i in range(3)]
    assert console(theirs.stderr) == console(ours.stderr) == []
    log = (run_folder(project) / "rank-1.log").read_text()  # accel's keeps every stream
    assert "out 1 2" in log and "[stderr] err 1 2" in log


@pytest.mark.slow
@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")
@pytest.mark.timeout(120)
def test_file_argv_and_path_are_those_of_torchrun(accel_exe: list[str], project: Path) -> None:
    (project / "sub").mkdir()
    shutil.copy(SCRIPTS / "sub" / "where.py", project / "sub" / "where.py")
    (project / "linked.py").symlink_to(project / "sub" / "where.py")
    # a folder and a zipapp holding __main__.py, which python and torchrun run: accel said
    # "no such script" of the one and raised SyntaxError (null bytes) on the other
    (project / "app").mkdir()
    shutil.copy(SCRIPTS / "sub" / "where.py", project / "app" / "__main__.py")
    zipapp.create_archive(project / "app", project / "app.pyz")
    for typed in ("sub/where.py", "./sub/../sub/where.py", "linked.py", "app", "app.pyz"):
        theirs = run([str(TORCHRUN), "--nproc-per-node", "1", typed, "--flag", "x"], project)
        ours = run([*accel_exe, "launch", "--quiet", typed, "--flag", "x"], project)
        assert theirs.returncode == 0 and ours.returncode == 0, ours.stderr
        expected = json.loads(theirs.stdout)
        main = "/__main__.py" if typed.startswith("app") else ""
        assert expected["file"] == os.path.join(str(project), typed) + main  # torchrun = python
        assert expected["argv"] == [typed, "--flag", "x"]
        assert expected["dirname_after_chdir"] == (typed != "app.pyz")
        log = next((project / ".accelerate" / "logs" / "runs").glob("*/rank-0.log"))
        assert json.loads(log.read_text()) == expected
        shutil.rmtree(project / ".accelerate" / "logs")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_no_python_runs_any_executable(accel_exe: list[str], project: Path) -> None:
    tool = project / "tool.sh"
    tool.write_text('#!/bin/sh\necho "rank $RANK of $WORLD_SIZE says $1"\nexit "$2"\n')
    tool.chmod(0o755)
    ok = run([*accel_exe, "launch", "--no_python", "-n", "2", "./tool.sh", "hi", "0"], project)
    assert ok.returncode == 0, ok.stderr
    assert "[rank0] rank 0 of 2 says hi" in ok.stdout
    assert "[rank1] rank 1 of 2 says hi" in ok.stdout
    failed = run([*accel_exe, "launch", "--no-python", "./tool.sh", "bye", "3"], project)
    assert failed.returncode == 1 and "rank 0 failed first" in failed.stderr
    assert "code 3" in failed.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_projects_with_imported_one_machine_configs_run_side_by_side(
    accel_exe: list[str], tmp_path: Path
) -> None:
    # Both configs say main_process_port 29500: imported, neither pins it.
    shared = tmp_path / "shared"
    shared.mkdir()
    runs = {}
    for name, other in (("a", "b"), ("b", "a")):
        folder = tmp_path / name
        folder.mkdir()
        ws = Workspace.discover(folder, env={})
        config_project.import_hf(ws, HF_CONFIGS / "hand_single_machine_port.yaml")
        runs[name] = subprocess.Popen(
            [*accel_exe, "launch", str(SCRIPTS / "overlap.py"), str(shared), name, other],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        for name, proc in runs.items():
            out, err = proc.communicate(timeout=200)
            assert proc.returncode == 0, err
            assert f"[rank0] {name} world 2 sum 2.0" in out
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
