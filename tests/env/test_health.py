"""``accel env --check``: failing for each class of problem, with the command that fixes
it, and what ``accel launch`` would refuse for the configured devices."""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from env_runner import env_in_process, make_ws, run_env

from accel.layout import make_owned_dir
from accel.workspace import Workspace
from run_helpers import tiny_tmpfs

# -- --check ------------------------------------------------------------------------------


def _torch_shim(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "shim" / "torch"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named torch (simulated)')\n")
    return {"PYTHONPATH": str(shim.parent)}


def _problem_setups(project: Path, tmp_path: Path) -> dict[str, object]:
    def invalid_config() -> dict[str, str]:
        make_ws(project).config_file.write_text("launch:\n  num_processes: many\n")
        return {}

    def unwritable() -> dict[str, str]:
        blocker = tmp_path / "a-file"
        blocker.write_text("")
        return {"ACCEL_WORKSPACE": str(blocker / ".accelerate")}

    def newer_layout() -> dict[str, str]:
        make_ws(project).layout_file.write_text('{"layout_version": 99}')
        return {}

    def torn_layout() -> dict[str, str]:
        make_ws(project).layout_file.write_text("garbage")
        return {}

    def gpus() -> dict[str, str]:
        return {"ACCEL_LAUNCH_GPU_IDS": "63"}

    def torn_checkpoint() -> dict[str, str]:
        step = make_ws(project).checkpoints_dir / "main" / "step-000000000007"
        make_owned_dir(step, parents=True)  # as a save leaves it: marker, no manifest
        (step / "model.pt").write_bytes(b"half")
        _age(step)
        return {}

    def temp_debris() -> dict[str, str]:
        stage = make_ws(project).tmp_dir / "cache-crashed"
        stage.mkdir()
        _age(stage)
        return {}

    def unreadable_checkpoint() -> dict[str, str]:
        step = make_ws(project).checkpoints_dir / "main" / "step-000000000007"
        step.mkdir(parents=True)
        (step / "manifest.json").write_text('{"format": 9}')
        return {}

    def foreign_workspace() -> dict[str, str]:
        (project / "notes.txt").write_text("mine")
        return {"ACCEL_WORKSPACE": str(project)}

    return {
        "config": invalid_config,
        "workspace_unwritable": unwritable,
        "layout": newer_layout,
        "layout-torn": torn_layout,
        "gpus": gpus,
        "debris": torn_checkpoint,
        "debris-tmp": temp_debris,
        "unreadable": unreadable_checkpoint,
        "not_a_workspace": foreign_workspace,
    }


def _age(path: Path) -> None:
    old = time.time() - 3 * 3600
    for p in [path, *path.rglob("*")]:
        os.utime(p, (old, old))


def _check_with_problem(
    kind: str,
    project: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, str]:
    """``accel env --check`` (exit code, stdout) with the problem ``kind`` set up."""
    extra = _problem_setups(project, tmp_path)[kind]()  # type: ignore[operator]
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    code, out, _ = env_in_process(capsys, "--check")
    return code, out


def test_check_passes_on_a_healthy_workspace(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_ws(project)
    code, out, _ = env_in_process(capsys, "--check")
    assert (code, out.strip()) == (0, "ok: the environment and the workspace are healthy")


@pytest.mark.parametrize(
    "kind",
    [
        "config",
        "workspace_unwritable",
        "layout",
        "gpus",
        "debris",
        "debris-tmp",
        "unreadable",
        "not_a_workspace",
    ],
)
def test_check_fails_for_each_problem(
    project: Path,
    tmp_path: Path,
    kind: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out = _check_with_problem(kind, project, tmp_path, capsys, monkeypatch)
    assert code == 1, out
    lines = out.splitlines()
    expected = kind.split("-")[0]
    assert any(line.startswith(f"problem: {expected}: ") for line in lines), lines
    assert all(line.startswith(("problem: ", "  fix: ")) for line in lines), lines
    data = json.loads(env_in_process(capsys, "--check", "--json")[1])
    assert data["healthy"] is False and expected in {p["kind"] for p in data["problems"]}


FIXES = {
    "config": {"accel config unset launch.num_processes"},
    # GPU 63 on a machine without GPUs: CPU mode; with some: the variable that asks for 63
    "gpus": {"accel config set launch.use_cpu true", "unset ACCEL_LAUNCH_GPU_IDS"},
    "debris": {"accel clean --yes"},
    "debris-tmp": {"accel clean --yes"},
    "layout": {"pip install -U accel-workspace"},
    # not `rm`: without its marker the folder no longer reads as accel's, and every
    # command, `accel config --default` included, refused it
    "layout-torn": {"echo '{\"layout_version\": 1}' > LAYOUT_FILE"},
}


@pytest.mark.parametrize("kind", sorted(FIXES))
def test_check_prints_the_exact_command_that_fixes_the_problem(
    project: Path,
    tmp_path: Path,
    kind: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accel.cli.main import main

    code, out = _check_with_problem(kind, project, tmp_path, capsys, monkeypatch)
    fixes = [
        line.removeprefix("  fix: ") for line in out.splitlines() if line.startswith("  fix: ")
    ]
    layout_file = Workspace.discover().layout_file
    expected = {fix.replace("LAYOUT_FILE", str(layout_file)) for fix in FIXES[kind]}
    assert code == 1 and len(fixes) == 1 and fixes[0] in expected, out
    fix = shlex.split(fixes[0])
    if fix[0] == "accel":
        assert main(fix[1:]) == 0
    elif fix[0] == "unset":
        monkeypatch.delenv(fix[1])
    elif fix[0] == "echo":  # echo TEXT > FILE, as the shell would run it
        assert fix[2] == ">" and len(fix) == 4, fix
        Path(fix[3]).write_text(fix[1] + "\n")
    else:
        return  # upgrading accel is not for a test to do
    capsys.readouterr()
    code, out, _ = env_in_process(capsys, "--check")
    assert (code, out.strip()) == (0, "ok: the environment and the workspace are healthy")


def test_a_run_left_running_by_a_dead_launcher_is_healed_never_a_problem(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel.runs import read_run, run_lock

    ws = make_ws(project)
    for run_id in ("20200101-000000-dead00", "20200101-000000-live00"):
        (ws.runs_dir / run_id).mkdir()
        (ws.runs_dir / run_id / "run.json").write_text('{"status": "running"}')
    with run_lock(ws.layout, "20200101-000000-live00"):  # a live launcher holds this one
        code, out, err = env_in_process(capsys, "--check")
        assert (code, out.strip()) == (0, "ok: the environment and the workspace are healthy")
        assert "run 20200101-000000-dead00 was left running" in err and "live00" not in err
        dead = json.loads((ws.runs_dir / "20200101-000000-dead00" / "run.json").read_text())
        assert dead["status"] == "crashed" and dead["ended_at"]
        assert read_run(ws.layout, "20200101-000000-live00").status == "running"
        live = json.loads((ws.runs_dir / "20200101-000000-live00" / "run.json").read_text())
        assert live["status"] == "running"
        _, _, again = env_in_process(capsys, "--check")
        assert "marked crashed" not in again  # healed once


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_check_fails_when_torch_is_missing(
    project: Path, tmp_path: Path, accel_exe: list[str]
) -> None:
    make_ws(project)
    env = {**os.environ, **_torch_shim(tmp_path)}
    result = run_env(accel_exe, "--check", env=env)
    assert result.returncode == 1, result
    assert result.stdout.splitlines() == [
        "problem: torch: torch cannot be imported (ImportError: No module named torch "
        "(simulated)); pip install torch",
        "  fix: pip install torch",
    ]
    report = run_env(accel_exe, "--markdown", env=env)
    assert report.returncode == 0 and "torch**: missing" in report.stdout


# -- devices and the configured launch ------------------------------------------------------


def _report_with_gpus(project: Path, config: str, build: str, gpus: int) -> list[str]:
    """``--check`` problems as on a machine with ``gpus`` GPUs and a ``build`` torch."""
    from dataclasses import replace

    from accel.devices import DeviceInfo
    from accel.env import collect, problems

    make_ws(project).config_file.write_text(config)
    ws = Workspace(project / ".accelerate")  # a fresh object reads the new config
    report = collect(ws, {}, devices=False)
    found = tuple(DeviceInfo(i, "NVIDIA H200", 150 * 2**30, "9.0") for i in range(gpus))
    report = replace(report, devices=found, torch=replace(report.torch, build=build))
    return [f"{p.kind}: {p.message}" for p in problems(ws, report) if p.kind == "gpus"]


@pytest.mark.parametrize(
    ("config", "build", "gpus", "expected"),
    [
        ("launch:\n  num_processes: 2\n", "cuda", 1, "gpus: launch.num_processes 2, launch."),
        ("launch:\n  num_processes: 2\n", "cuda", 2, None),
        ("launch:\n  num_processes: auto\n", "cuda", 1, None),
        ("launch:\n  num_processes: 2\n  use_cpu: true\n", "cuda", 1, None),
        ("launch:\n  num_processes: 2\n", "cuda", 0, None),  # no GPU: a CPU run
        ("launch:\n  gpu_ids: [0, 3]\n", "cuda", 2, "gpus: launch.num_processes 1, launch."),
        ("launch:\n  num_processes: 1\n", "cpu", 2, "gpus: 2 GPU(s) visible but torch"),
        (
            "launch:\n  gpu_ids: [0]\n",
            "cuda",
            0,
            "gpus: launch.num_processes 1, launch.gpu_ids 0: no",
        ),
    ],
)
def test_check_reports_what_launch_would_refuse(
    project: Path, config: str, build: str, gpus: int, expected: str | None
) -> None:
    found = _report_with_gpus(project, config, build, gpus)
    if expected is None:
        assert found == []
    else:
        (line,) = found
        assert line.startswith(expected) and "\n" not in line


def test_the_mismatch_line_is_the_one_launch_prints(project: Path) -> None:
    from accel.devices import gpu_mismatch

    (line,) = _report_with_gpus(project, "launch:\n  num_processes: 2\n", "cuda", 1)
    assert line.endswith(str(gpu_mismatch(2, 1, None)))
    assert "1 GPU is visible" in line and "-n 1" in line and "--cpu" in line


LAUNCH_REFUSES = {
    "launch.env": ('launch:\n  env:\n    RANK: "5"\n', "RANK"),
    "min_machines": (
        "launch:\n  num_machines: 2\n  min_machines: 3\n  rdzv_endpoint: node0:29500\n",
        "launch.min_machines 3 is more than launch.num_machines 2",
    ),
    "machine_rank": (
        "launch:\n  num_machines: 2\n  machine_rank: 2\n  rdzv_endpoint: node0:29500\n",
        "--node-rank 2 is out of range for --nnodes 2",
    ),
}


@pytest.mark.parametrize("case", sorted(LAUNCH_REFUSES))
def test_check_fails_for_a_config_that_launch_refuses(
    project: Path, case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel.cli.main import main

    config, named = LAUNCH_REFUSES[case]
    make_ws(project).config_file.write_text(config)
    monkeypatch.chdir(project)
    (project / "train.py").write_text("")
    assert main(["launch", "--dry-run", "train.py"]) == 2
    refused = capsys.readouterr().err.strip()
    assert named in refused
    code, out, _ = env_in_process(capsys, "--check")
    assert code == 1, out
    # the launch plan's own line, not a copy of its rule
    assert out.splitlines() == [
        f"problem: launch: accel launch would refuse this configuration: "
        f"{refused.removeprefix('error: ')}"
    ]


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A workspace on a real tmpfs, remounted read-only (root only: skipped elsewhere)."""
    import subprocess

    with tiny_tmpfs(tmp_path / "ro") as point:
        make_owned_dir(point / "p" / ".accelerate", parents=True)
        (point / "p" / ".accelerate" / "layout.json").write_text('{"layout_version": 1}')
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True, timeout=30)
        yield point / "p"


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_read_only_mount_is_named_and_no_chmod_is_offered(
    read_only_mount: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 'fix: chmod -R u+w ...' can make nothing on a read-only filesystem writable
    monkeypatch.chdir(read_only_mount)
    code, out, _ = env_in_process(capsys, "--check")
    assert code == 1 and "its filesystem is mounted read-only" in out, out
    assert "chmod" not in out
