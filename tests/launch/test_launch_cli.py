"""accel launch / runs / logs without starting workers: dry run, bad input, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import SCRIPTS

from accel import Workspace

# Every test here starts `accel` processes: a hang fails fast.
pytestmark = pytest.mark.timeout(120)

Accel = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_starts_nothing(accel: Accel, project: Path) -> None:
    script = str(SCRIPTS / "env_dump.py")
    done = accel("launch", "--dry-run", "--json", "-n", "3", "--env", "A=1", script, "x", "--y")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["nproc_per_node"] == 3 and plan["world_size"] == 3
    assert plan["worker_command"][-3:] == [script, "x", "--y"]
    assert plan["worker_env"]["A"] == "1" and plan["worker_env"]["OMP_NUM_THREADS"] == "1"
    assert plan["config"]["launch"]["num_processes"] == 3
    text = accel("launch", "--dry-run", script).stdout
    assert "ACCEL_RUN_ID" in text and "rendezvous" in text
    assert not (project / ".accelerate" / "logs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "zero"], "-n/--nproc-per-node"),
        (["--nnodes", "2"], "--rdzv-endpoint"),
        (["--mixed-precision", "fp8"], "--mixed-precision"),
        (["--env", "NOEQUALS"], "--env"),
        (["--stop-grace-period", "soon"], "--stop-grace-period"),
        (["--ranks", "a"], "--ranks"),
    ],
)
def test_bad_flags_exit_2_and_start_nothing(
    accel: Accel, project: Path, args: list[str], message: str
) -> None:
    done = accel("launch", *args, str(SCRIPTS / "env_dump.py"))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and done.stderr.count("\n") <= 2
    assert not (project / ".accelerate" / "logs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ACCEL_RDZV_LAST_CALL": "soon"},
            "ACCEL_RDZV_LAST_CALL='soon' is not a number of seconds",
        ),
        (
            {"ACCEL_RDZV_CONNECT_TIMEOUT": "0"},
            "ACCEL_RDZV_CONNECT_TIMEOUT='0' must be more than 0 ",
        ),
        (
            {"ACCEL_CHECKPOINTS_SNAPSHOT_EVERY": "1", "ACCEL_SHM_DIR": "/nonexistent/shm"},
            "checkpoints.snapshot_every keeps snapshots in ACCEL_SHM_DIR=/nonexistent/shm, which ",
        ),
    ],
)
def test_a_bad_launcher_variable_exits_2_and_makes_nothing(
    accel: Accel, project: Path, env: dict[str, str], message: str
) -> None:
    """On one node too (the rendezvous timings matter to restarts and spares as well):
    read before the workspace, a run lock or a run folder is made, as every flag is."""
    done = accel("launch", "-n", "2", str(SCRIPTS / "env_dump.py"), env=env)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(f"error: {message}")
    assert not (project / ".accelerate").exists()


@pytest.mark.slow
def test_missing_script(accel: Accel, project: Path) -> None:
    done = accel("launch", "nope.py")
    assert done.returncode == 2 and "no such script: nope.py" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("dry", [("--dry-run",), ()])
def test_missing_module_is_one_line_before_any_worker(
    accel: Accel, project: Path, dry: tuple[str, ...]
) -> None:
    (project / "train_model.py").write_text("open('ran', 'w').close()\n")
    done = accel("launch", *dry, "-m", "train_modle", "--lr", "1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"error: -m train_modle: no module 'train_modle' in {project} or on the "
        "workers' sys.path; did you mean -m train_model? (a script is launched without -m)"
    ]
    assert not (project / "ran").exists() and not (project / ".accelerate" / "logs").exists()


@pytest.mark.slow
def test_help_runs_and_logs_do_not_import_torch(project: Path) -> None:
    code = (
        "import sys\n"
        "from accel.cli.main import main\n"
        "for argv in (['launch', '--help'], ['runs'], ['runs', '--json'], ['logs']):\n"
        "    main(argv)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "False", done.stdout + done.stderr


@pytest.mark.slow
def test_runs_and_logs_without_runs(accel: Accel) -> None:
    assert json.loads(accel("runs", "--json").stdout) == []
    assert "no runs yet" in accel("runs").stdout
    done = accel("logs")
    assert done.returncode == 2 and "no runs" in done.stderr


@pytest.mark.slow
def test_runs_limit_and_logs_of_a_finished_run(accel: Accel, project: Path) -> None:
    runs_dir = Workspace(project / ".accelerate").ensure().runs_dir
    for i in range(3):
        folder = runs_dir / f"2026010{i}-000000-aaaaa{i}"
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(
            json.dumps({"status": "failed", "exit_code": 1, "failed_rank": 1, "world_size": 2})
        )
        (folder / "rank-0.log").write_text(f"zero {i}\n")
        (folder / "rank-1.log").write_text(f"one {i}\npartial")
    listed = json.loads(accel("runs", "--json", "--limit", "2").stdout)
    assert [r["id"][-1] for r in listed] == ["2", "1"]
    assert listed[0]["status"] == "failed" and listed[0]["live"] is False
    assert "failed (rank 1)" in accel("runs").stdout
    logs = accel("logs").stdout
    # a partial last line is shown too: the worker wrote it
    assert logs.splitlines() == ["[rank0] zero 2", "[rank1] one 2", "[rank1] partial"]
    follow = accel("logs", "aaaaa0", "--follow", "--rank", "0", timeout=10)
    assert follow.stdout.splitlines() == ["[rank0] zero 0"]
    assert "failed, exit code 1" in follow.stderr
    bad = accel("logs", "nope")
    assert bad.returncode == 2 and "unknown run 'nope'" in bad.stderr


# A live run that has saved into the default series: its rank 0 holds the lease.
HOLDER = """
import sys
from accel.workspace import Workspace
from accel.store.lease import SeriesLease
SeriesLease(Workspace(sys.argv[1]).layout, "default", "20990101-000000-abcdef").acquire()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_a_launch_into_a_series_a_live_run_holds_is_refused_before_any_worker(
    accel: Accel, ws: Workspace, project: Path
) -> None:
    marker = project / "a-worker-ran"
    script = project / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ws.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        done = accel("launch", "-n", "2", str(script))
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert f"series 'default' is held by pid {holder.pid}" in line
    assert "run 20990101-000000-abcdef" in line and "--run-name" in line
    assert "logs in" not in done.stdout + done.stderr  # no run folder is named
    assert not marker.exists()
    assert not list((ws.path / "logs" / "runs").glob("*"))
