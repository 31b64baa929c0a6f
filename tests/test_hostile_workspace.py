"""A workspace the filesystem refuses: ``locks`` replaced by a file, a read-only mount, a
full disk, a file-size limit, unreadable parts. Every writing command says so in one
line (exit 1 or 2), never "unexpected", never a traceback; the API raises AccelErrors;
``accel env --check`` names the problem."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import run_helpers
from accel import Workspace
from accel.errors import AccelError

pytestmark = pytest.mark.timeout(120)
IS_ROOT = os.geteuid() == 0
COMMANDS = [
    ["config", "set", "launch.num_processes", "2"],
    ["config", "--default", "--force"],
    ["launch", "--cpu", "t.py"],
    ["sync", "push", "file:///nonexistent-accel-remote"],
]


def accel_run(
    exe: list[str], cwd: Path, args: list[str], preexec: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_helpers.accel(cwd, *args, timeout=90, exe=exe, preexec=preexec)


def assert_one_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    err = done.stderr.strip()
    assert done.returncode in (1, 2), (done.returncode, err)
    assert "unexpected" not in err and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith("accel: run ")]
    assert len(lines) == 1, err
    assert any(n in lines[0] for n in needles), err


def populated(root: Path) -> Workspace:
    (root / "t.py").write_text("print('hello')\n")
    ws = Workspace(root / ".accelerate").ensure()
    ws.store.set("k", 1)
    ws.cache.put("c", b"cached")
    return ws


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A small tmpfs at ``path`` (root only: skipped elsewhere)."""
    path.mkdir()
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def api_refuses(ws: Workspace, *needles: str) -> None:
    fresh = Workspace(ws.path)  # no cached config
    for write in (lambda: fresh.store.set("k", 2), lambda: fresh.cache.put("c2", b"x")):
        with pytest.raises(AccelError) as caught:
            write()
        assert any(n in str(caught.value) for n in needles), caught.value


# -- locks replaced by a file -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_locks_replaced_by_a_file(project: Path, accel_exe: list[str], args: list[str]) -> None:
    ws = populated(project)
    for lock in ws.locks_dir.iterdir():
        lock.unlink()
    ws.locks_dir.rmdir()
    ws.locks_dir.write_text("not a folder\n")
    assert_one_line(accel_run(accel_exe, project, args), "File exists", "Not a directory")


@pytest.mark.slow
def test_locks_replaced_by_a_file_api_and_env_check(project: Path, accel_exe: list[str]) -> None:
    ws = populated(project)
    for lock in ws.locks_dir.iterdir():
        lock.unlink()
    ws.locks_dir.rmdir()
    ws.locks_dir.write_text("not a folder\n")
    api_refuses(ws, "File exists", "Not a directory")
    check = accel_run(accel_exe, project, ["env", "--check", "--no-devices"])
    assert check.returncode == 1
    assert "locks is a file where a folder belongs" in check.stdout


# -- read-only -----------------------------------------------------------------------------


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A project whose workspace is on a read-only filesystem (or folders, as non-root)."""
    if IS_ROOT:
        with tmpfs(tmp_path / "ro", "8m") as root:
            populated(root)
            subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
            yield root
        return
    root = tmp_path / "ro"
    root.mkdir()
    populated(root)
    for folder, _, _ in os.walk(root):
        Path(folder).chmod(0o555)
    yield root
    for folder, _, _ in os.walk(root):
        Path(folder).chmod(0o755)


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS[:3], ids=lambda a: " ".join(a[:2]))
def test_a_read_only_workspace(read_only: Path, accel_exe: list[str], args: list[str]) -> None:
    needles = ("Read-only file system", "Permission denied", "cannot be created")
    assert_one_line(accel_run(accel_exe, read_only, args), *needles)


@pytest.mark.slow
def test_a_read_only_workspace_api(read_only: Path) -> None:
    api_refuses(Workspace(read_only / ".accelerate"), "Read-only", "Permission denied")


@pytest.mark.slow
def test_a_read_only_workspace_still_reads(read_only: Path) -> None:
    ws = Workspace(read_only / ".accelerate")
    assert ws.store.get("k") == 1
    assert ws.cache.get("c") == b"cached"  # its last use cannot be recorded: still a hit


# -- a full disk, a file-size limit --------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "full", "4m") as root:
        populated(root)
        with open(root / "filler", "wb") as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 65536)
        yield root


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS[:3], ids=lambda a: " ".join(a[:2]))
def test_a_full_disk(full_disk: Path, accel_exe: list[str], args: list[str]) -> None:
    assert_one_line(accel_run(accel_exe, full_disk, args), "No space left on device")


@pytest.mark.slow
def test_a_full_disk_api_and_env_check(full_disk: Path, accel_exe: list[str]) -> None:
    api_refuses(Workspace(full_disk / ".accelerate"), "No space left on device")
    check = accel_run(accel_exe, full_disk, ["env", "--check", "--no-devices"])
    assert check.returncode == 1 and "problem: disk_full" in check.stdout


def _file_size_limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))


@pytest.mark.slow
def test_a_file_size_limit(project: Path, accel_exe: list[str]) -> None:
    populated(project)
    args = ["config", "set", "launch.env", "A=" + "x" * 200]
    done = accel_run(accel_exe, project, args, preexec=_file_size_limit)
    assert_one_line(done, "File too large")


# -- unreadable parts (permissions do not stop root) ---------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(IS_ROOT, reason="root reads and writes whatever the permissions")
@pytest.mark.parametrize("part", ["config", "locks", "logs/runs"])
def test_unreadable_parts(project: Path, accel_exe: list[str], part: str) -> None:
    populated(project)
    folder = project / ".accelerate" / part
    folder.chmod(0)
    try:
        done = accel_run(accel_exe, project, COMMANDS[0])
        if part != "logs/runs":
            assert_one_line(done, "Permission denied")
        check = accel_run(accel_exe, project, ["env", "--check", "--no-devices"])
        assert check.returncode == 1 and "unexpected" not in check.stderr
    finally:
        folder.chmod(0o755)
