"""Every test runs in a fresh folder with a fake HOME, so none can touch the real one."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import run_helpers
from accel.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent


os.register_at_fork(before=run_helpers.collect_before_fork)


@pytest.fixture(scope="session", autouse=True)
def scratch_for_children() -> Iterator[None]:
    """The processes the suite starts make their temporary files in one folder, removed
    at the end of the session: torchrun (the baseline of many tests) leaves a
    ``torchelastic_*`` log folder in the temporary folder at every launch, and a
    SIGKILLed process leaves what it had made. Short (``/tmp/accel-tests-*``), for the
    socket paths made in it."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="accel-tests-")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before
        shutil.rmtree(folder, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--launch-preload",
        action="store_true",
        help="every launch the tests make forks its workers from a preloaded template "
        "(launch.preload); tests/launch must pass both ways",
    )


@pytest.fixture(autouse=True)
def fast_lane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test that starts a process must be marked ``slow``: ``pytest -m "not slow"`` is
    the inner loop and must stay fast. Every way a test (or the code it calls) can start
    one is watched; an unmarked test that did fails, naming what it started."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    started: list[str] = []
    popen_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any) -> Any:
        started.append(" ".join(map(str, args)) if isinstance(args, list | tuple) else str(args))
        return popen_child(self, args, *rest)

    def watch(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            started.append(f"{name}{args[:2]!r}")
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, watch(f"os.{name}", getattr(os, name)))
    import multiprocessing.util

    spawnv = multiprocessing.util.spawnv_passfds  # the spawn and forkserver contexts
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", watch("spawn", spawnv))
    yield
    if started:
        pytest.fail(
            f"this test started a process ({started[0][:200]}): mark it "
            "@pytest.mark.slow (with a timeout), or keep it in-process",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    for name in list(os.environ):
        if name.startswith(
            ("ACCEL_", "ACCELERATE_", "TORCHELASTIC_", "SLURM_", "PET_", "SKYPILOT_")
        ) or name in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


@pytest.fixture
def project(isolated: Path) -> Path:
    """The current folder of the test: an empty project without a workspace yet."""
    return isolated


@pytest.fixture
def ws(project: Path) -> Workspace:
    """The project's workspace, created (a test module may override it to add state,
    taking this one as its ``ws`` argument)."""
    return Workspace.discover().ensure()


@pytest.fixture
def accel_exe() -> list[str]:
    """The installed ``accel`` executable (the path users take)."""
    return run_helpers.accel_command()


@pytest.fixture
def accel(accel_exe: list[str], project: Path) -> run_helpers.Accel:
    """``accel(*args, timeout=90, env=None)``: the installed accel run in the project."""

    def run(
        *args: str, timeout: float = 90, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_helpers.accel(project, *args, env=env, timeout=timeout, exe=accel_exe)

    return run


@pytest.fixture
def start_accel(accel_exe: list[str], project: Path) -> Iterator[run_helpers.Start]:
    """``start_accel(*args)``: accel started in the background, SIGKILLed if still alive."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = run_helpers.start(project, *args, exe=accel_exe)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
