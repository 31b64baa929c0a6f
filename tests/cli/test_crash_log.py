"""Crash logs: in the workspace, else in a private folder of the user's; never through a
planted link, never with a secret in clear, never empty."""

from __future__ import annotations

import os
import resource
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

from accel.cli.main import main

SECRET = "tok-3f9a8b7c6d5e"


@pytest.fixture
def crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """`accel status` raises an unexpected error carrying a secret in its message."""
    import accel.status

    def boom(ws: object) -> None:
        raise RuntimeError(f"kaboom for https://user:{SECRET}@hub.example/x")

    monkeypatch.setattr(accel.status, "collect", boom)
    monkeypatch.setattr(sys, "argv", ["accel", "status", "--hub-token", SECRET])


@pytest.fixture
def tmpdir_(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "shared-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def homeless(monkeypatch: pytest.MonkeyPatch, tmpdir_: Path) -> Path:
    """No cache folder to use: the shared temp folder is the last resort."""
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME")
    return tmpdir_


def crash_path(err: str) -> Path:
    return Path(err.split("the traceback is in ")[1].split(" (please")[0])


@pytest.mark.usefixtures("crashing")
def test_outside_a_workspace_the_log_goes_to_a_private_folder(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and SECRET not in err
    path = crash_path(err)
    assert path.parent == Path(os.environ["XDG_CACHE_HOME"]) / "accel" / "crash"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "Traceback" in text and "kaboom" in text and SECRET not in text
    assert "--hub-token ***" in text


@pytest.mark.usefixtures("crashing")
def test_in_a_writable_workspace_the_log_goes_to_its_logs(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel.workspace import Workspace

    Workspace(project / ".accelerate").ensure()
    assert main(["status"]) == 1
    path = crash_path(capsys.readouterr().err)
    assert path.parent == project / ".accelerate" / "logs"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.usefixtures("crashing", "project")
def test_planted_links_are_never_followed(
    tmp_path: Path, homeless: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmpdir_ = homeless
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    # Another user got there first: the per-user folder is a link to theirs, and the
    # names a crash log used to take (crash-<time>-<pid>.log) point at the victim.
    (tmpdir_ / f"accel-{os.getuid()}").symlink_to(attacker)
    now = time.time()
    for delta in range(4):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + delta))
        (tmpdir_ / f"crash-{stamp}-{os.getpid()}.log").symlink_to(victim)

    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert "the traceback could not be saved" in err and err.count("\n") == 1
    assert victim.read_text() == "precious\n"
    assert list(attacker.iterdir()) == []


@pytest.mark.usefixtures("crashing", "project")
def test_an_open_per_user_folder_is_closed_before_use(
    homeless: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = homeless / f"accel-{os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    assert main(["status"]) == 1
    path = crash_path(capsys.readouterr().err)
    assert path.parent == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_log_that_cannot_be_written_whole_is_removed(tmp_path: Path, tmpdir_: Path) -> None:
    from accel.crashlog import write_crash_log

    folder = tmp_path / "logs"
    folder.mkdir()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    try:
        with pytest.raises(OSError):
            write_crash_log("x" * 5000, folder, {})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    assert list(folder.iterdir()) == []
    assert list((tmpdir_ / f"accel-{os.getuid()}").iterdir()) == []
