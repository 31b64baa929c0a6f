"""launch.preload: workers forked from a template that imported torch, seen as exec'd.

The whole launch suite also runs with ``--launch-preload`` (every launch preloaded);
these tests compare the two modes directly and cover what only preload has: the
template's thread check and the shim standing in for its worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, pid_alive, run_folder, run_json, wait_for

from accel.launch.plan import BOOTSTRAP
from accel.launch.preload import SHIM, TEMPLATE, first_path, shim_args

# Leans on torch's internals: the tests marked `edge` also run on the oldest and the
# newest torch (.ci/run), one case per journey; the rest run on the default.

Accel = Callable[..., subprocess.CompletedProcess[str]]
StartAccel = Callable[..., subprocess.Popen[str]]
PER_RUN = (
    "ACCEL_RUN_ID",
    "ACCEL_RUN_DIR",
    "ACCEL_LAUNCHER_PID",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
)


def _probe(accel: Accel, project: Path, mode: str, *extra: str) -> dict[int, dict[str, object]]:
    out = Path(tempfile.mkdtemp(prefix=mode.strip("-") + "-", dir=project))
    done = accel("launch", "-n", "2", mode, *extra, str(SCRIPTS / "preload_probe.py"), str(out))
    assert done.returncode == 0, done.stderr
    return {r: json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)}


# docs/commands/launch.md, "What differs from exec", and only that: for rank r, what the
# probe sees under exec and under preload.
DIFFERENCES: dict[str, Callable[[int], tuple[object, object]]] = {
    "parent": lambda r: ("launcher", "template"),  # os.getppid()
    "program": lambda r: ("_bootstrap.py", "_template.py"),  # the command line `ps` shows
    "preloaded": lambda r: (False, True),  # torch in sys.modules before the script runs
    "rank_at_import": lambda r: (str(r), None),  # a preloaded module's import: no RANK
    "gc_frozen": lambda r: (False, True),  # gc.get_freeze_count() > 0
}
SHARED_BY_RANKS = "hash"  # the template's string hash seed, under preload only
OWN_PER_RANK = "rng"  # in both modes: checked across ranks and runs
NOT_COMPARED = ("env", "argv", "stdout_fd_target")  # per run: compared without those


def _comparable(data: dict[str, object]) -> dict[str, object]:
    env = {k: v for k, v in dict(data["env"]).items() if k not in PER_RUN}  # type: ignore[call-overload]
    same = {
        k: v
        for k, v in data.items()
        if k not in (*NOT_COMPARED, *DIFFERENCES, SHARED_BY_RANKS, OWN_PER_RANK)
    }
    return {**same, "env": env, "argv0": data["argv"][0]}  # type: ignore[index]


def _assert_own_generators(*runs: dict[int, dict[str, object]]) -> None:
    """Every rank of every run drew its own numbers from every global generator."""
    draws = [ranks[r][OWN_PER_RANK] for ranks in runs for r in ranks]
    for name in draws[0]:  # type: ignore[attr-defined]
        values = [json.dumps(d[name]) for d in draws]  # type: ignore[index]
        assert len(set(values)) == len(values), f"{name} repeats across ranks/runs: {values}"


@contextlib.contextmanager
def _ignoring(signals: tuple[signal.Signals, ...]) -> Iterator[None]:
    """What ``nohup`` and ``cmd &`` in a script do: the launcher inherits them ignored."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "ignored",
    [
        pytest.param((), marks=pytest.mark.edge, id="from-a-shell"),
        pytest.param((signal.SIGHUP, signal.SIGINT, signal.SIGQUIT), id="under-nohup-in-a-script"),
    ],
)
def test_a_preloaded_worker_sees_what_an_exec_worker_sees(
    accel: Accel,
    project: Path,
    ignored: tuple[signal.Signals, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCEL_LAUNCH_PRELOAD_MODULES", "import_probe")  # preload only
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    with _ignoring(ignored):
        exec_ranks = _probe(accel, project, "--no-preload")
        fork_ranks = _probe(accel, project, "--preload")
    for rank in (0, 1):
        exec_data, fork_data = exec_ranks[rank], fork_ranks[rank]
        assert _comparable(fork_data) == _comparable(exec_data)
        assert sorted(fork_data["env"]) == sorted(exec_data["env"])  # type: ignore[call-overload]
        assert fork_data["env"]["RANK"] == str(rank)  # type: ignore[index]
        assert fork_data["c_env_rank"] == str(rank)  # the C environment too (a shell sees it)
        assert fork_data["session_leader"] is True
        for key, expected in DIFFERENCES.items():
            assert (exec_data[key], fork_data[key]) == expected(rank), key
    assert fork_ranks[0][SHARED_BY_RANKS] == fork_ranks[1][SHARED_BY_RANKS]
    assert exec_ranks[0][SHARED_BY_RANKS] != exec_ranks[1][SHARED_BY_RANKS]
    _assert_own_generators(exec_ranks, fork_ranks)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["--no-preload", "--preload"])
def test_every_rank_of_every_run_draws_its_own_random_numbers(
    accel: Accel, project: Path, mode: str
) -> None:
    # torch's initial_seed, a draw of its default generator, random, numpy's global state
    _assert_own_generators(_probe(accel, project, mode), _probe(accel, project, mode))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_module_that_starts_a_thread_makes_workers_start_by_exec(
    accel: Accel, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "threaded.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    (project / "probe.py").write_text((SCRIPTS / "preload_probe.py").read_text())
    monkeypatch.setenv("ACCEL_LAUNCH_PRELOAD_MODULES", "threaded")
    out = project / "out"
    out.mkdir()
    done = accel("launch", "-n", "2", "--preload", "probe.py", str(out), timeout=150)
    assert done.returncode == 0, done.stderr
    assert "the template has" in done.stderr and "forking it is unsafe" in done.stderr
    for rank in (0, 1):
        assert json.loads((out / f"rank-{rank}.json").read_text())["preloaded"] is False


def test_preload_config_keys_and_their_view(project: Path) -> None:
    from accel.config import schema

    assert schema.field("launch.preload").default is False
    assert schema.field("launch.preload").env_var == "ACCEL_LAUNCH_PRELOAD"
    assert schema.field("launch.preload_modules").default == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_shim_takes_its_worker_and_the_run_fails(
    start_accel: StartAccel, project: Path
) -> None:
    out = project / "out"
    out.mkdir()
    proc = start_accel("launch", "-n", "2", "--preload", str(SCRIPTS / "sleeper.py"), str(out))
    wait_for(lambda: all((out / f"ready-{r}").exists() for r in (0, 1)), 60, "workers to start")
    worker, grandchild = (int(p) for p in (out / "ready-1").read_text().split())
    wait_for(lambda: (run_folder(project) / "workers.json").exists(), 10, "workers.json")
    shims = json.loads((run_folder(project) / "workers.json").read_text())["pids"]
    assert int(shims["1"]) != worker  # the agent's child is the shim, the worker its stand-in
    os.kill(int(shims["1"]), signal.SIGKILL)
    wait_for(lambda: not pid_alive(worker) and not pid_alive(grandchild), 10, "worker to die")
    proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert run_json(project)["status"] == "failed"


WARM_PROBE = """
import os, sys, time
dynamo = "torch._dynamo" in sys.modules  # before the script imported anything
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
with open(os.path.join(sys.argv[1], f"a{attempt}-r{rank}"), "w") as fh:
    fh.write(str(dynamo))
if attempt == "0":
    while not os.path.exists(os.path.join(sys.argv[1], "go")):
        time.sleep(0.02)
    sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restart_is_forked_from_a_template_that_imported_dynamo(
    start_accel: StartAccel, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An optimizer's first use imports torch._dynamo (1.3 s): the template imports it once
    # the first workers started (not before: their start would wait on it), so that a
    # restart's workers have it. The first attempt's workers do not.
    warm, code, out = _warm_run(start_accel, project, monkeypatch, "2", "1")
    assert warm == "_preload_dynamo" and code == 0
    seen = {p.name: p.read_text() for p in out.glob("a*")}
    assert seen == {"a0-r0": "False", "a0-r1": "False", "a1-r0": "True", "a1-r1": "True"}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_template_whose_run_cannot_restart_leaves_dynamo_to_its_workers(
    start_accel: StartAccel, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without restarts the template forks no other worker: importing dynamo (1.2-1.4 CPU-s)
    # would only take a core from the workers' first steps.
    warm, code, out = _warm_run(start_accel, project, monkeypatch, "1", "0")
    assert warm == ""
    assert code != 0  # the probe's first attempt exits 3, and is not restarted
    assert {p.name for p in out.glob("a*")} == {"a0-r0"}


def _warm_run(
    start_accel: StartAccel, project: Path, monkeypatch: pytest.MonkeyPatch, n: str, restarts: str
) -> tuple[str, int, Path]:
    """:data:`WARM_PROBE` launched preloaded: what its template did at its first quiet
    moment (``pids/warm``), the launch's exit code, and the folder the probe wrote."""
    scratch = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))  # a short socket path
    monkeypatch.setenv("TMPDIR", str(scratch))
    out = project / "out"
    out.mkdir()
    (project / "probe.py").write_text(WARM_PROBE)
    proc = start_accel(
        "launch", "-n", n, "--preload", "--max-restarts", restarts, "probe.py", str(out)
    )
    try:
        wait_for(lambda: list(scratch.glob("*/pids/warm")), 60, "the template to be warm")
        warm = next(scratch.glob("*/pids/warm")).read_text()
        (out / "go").touch()
        proc.communicate(timeout=60)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return warm, proc.returncode, out


def test_shim_arguments_keep_the_interpreter_flags_and_the_bootstrap_arguments(
    tmp_path: Path,
) -> None:
    args = ("-u", str(BOOTSTRAP), "-m", "pkg.train", "--lr", "1")
    sock = tmp_path / "preload.sock"
    assert shim_args(args, sock) == ("-u", str(SHIM), str(sock), "-m", "pkg.train", "--lr", "1")
    with pytest.raises(ValueError):
        shim_args(("-u", "other.py"), sock)
    assert first_path(tmp_path, ("-m", "pkg")) == str(tmp_path)
    (tmp_path / "sub").mkdir()
    assert first_path(tmp_path, ("sub/train.py", "x")) == str(tmp_path / "sub")


@pytest.mark.slow
def test_preload_and_no_preload_together_are_refused(accel: Accel) -> None:
    done = accel("launch", "--preload", "--no-preload", "x.py")
    assert done.returncode == 2
    assert "give --preload or --no-preload, not both" in done.stderr


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_telemetry_samples_the_forked_workers_not_their_shims(
    accel: Accel, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "pid.py").write_text(
        "import os, sys, time\n"
        "open(os.path.join(sys.argv[1], 'pid-' + os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "time.sleep(3)\n"
    )
    monkeypatch.setenv("ACCEL_LOGS_RESOURCE_INTERVAL", "0.2s")
    done = accel("launch", "-n", "2", "--preload", "pid.py", str(project))
    assert done.returncode == 0, done.stderr
    workers = {r: int((project / f"pid-{r}").read_text()) for r in (0, 1)}
    samples = [
        json.loads(line)
        for line in (run_folder(project) / "resources.jsonl").read_text().splitlines()
    ]
    sampled = {int(r): s["pid"] for sample in samples for r, s in sample["ranks"].items()}
    assert sampled == workers


def _load_template(monkeypatch: pytest.MonkeyPatch) -> Any:
    spec = importlib.util.spec_from_file_location("_accel_template_probe", TEMPLATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks itself up
    spec.loader.exec_module(module)
    return module


def test_a_worker_reseeds_what_the_template_seeded_at_import_but_keeps_a_chosen_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import random

    import numpy
    import torch

    template = _load_template(monkeypatch)
    template._torch_import_seed = torch.initial_seed()  # as the template's import left it
    random.seed(7)  # a preloaded module's seeds for random and numpy are not kept (launch.md)
    numpy.random.seed(7)
    before = (torch.initial_seed(), random.getstate(), numpy.random.get_state()[1].tolist())
    template._reseed()
    after = (torch.initial_seed(), random.getstate(), numpy.random.get_state()[1].tolist())
    assert all(b != a for b, a in zip(before, after, strict=True))
    assert numpy.random.get_state()[2:] == numpy.random.RandomState().get_state()[2:]
    # A preloaded module that seeds torch at import did so in every exec'd worker too.
    torch.manual_seed(1234)
    template._reseed()
    assert torch.initial_seed() == 1234


def test_a_temporary_folder_too_deep_for_a_socket_falls_back_to_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deep TMPDIR (a CI job's, pytest-xdist's) made the template's socket path pass
    sun_path's 108 bytes: every preloaded launch crashed with "AF_UNIX path too long"."""
    import shutil
    import socket

    from accel.launch import preload

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    folder = preload._private_folder(None)
    try:
        assert folder.parent == Path("/tmp") and oct(folder.stat().st_mode & 0o777) == "0o700"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(str(folder / preload.SOCKET))  # fits
    finally:
        shutil.rmtree(folder)
    assert not any(deep.iterdir())  # the folder it could not use is gone
