"""accel launch with real processes (CPU, gloo): environment, logs, failures, signals."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import (
    SCRIPTS,
    assert_gone,
    assert_no_orphans,
    pid_alive,
    run_folder,
    run_json,
    tree,
    wait_for,
    wait_for_guard_rounds,
)

Accel = Callable[..., subprocess.CompletedProcess[str]]
StartAccel = Callable[..., subprocess.Popen[str]]

TORCHRUN_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE",
)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_ranks_env_args_all_reduce_logs_and_records(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    done = accel(
        "launch",
        "-n",
        "2",
        "--env",
        "EXTRA=yes",
        "--mixed-precision",
        "bf16",
        str(SCRIPTS / "env_dump.py"),
        str(out),
        "--all-reduce",
        "--lr",
        "0.1",
        "-x",
    )
    assert done.returncode == 0, done.stderr
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for r, data in enumerate(ranks):
        env = data["env"]
        assert all(name in env for name in TORCHRUN_VARS), set(TORCHRUN_VARS) - set(env)
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == (str(r), str(r), "2")
        assert env["OMP_NUM_THREADS"] == "1" and env["PYTHONUNBUFFERED"] == "1"
        assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["ACCELERATE_USE_CPU"] == "true"
        assert env["ACCEL_WORKSPACE"] == str(project / ".accelerate")
        assert env["ACCEL_RUN_NAME"] == "default" and env["EXTRA"] == "yes"
        assert data["argv"][1:] == [str(out), "--all-reduce", "--lr", "0.1", "-x"]
        assert data["path0"] == str(SCRIPTS)  # like `python script.py`
        assert data["all_reduce"] == 3.0
    run_id = ranks[0]["env"]["ACCEL_RUN_ID"]
    assert ranks[1]["env"]["TORCHELASTIC_RUN_ID"] == run_id  # rendezvous id of a 1-node run

    # console: every line prefixed with its rank, stdout on stdout, stderr on stderr
    assert "[rank0] hello from rank 0" in done.stdout
    assert "[rank1] stderr line from rank 1" in done.stderr
    assert "stderr line" not in done.stdout and "hello from" not in done.stderr
    # logs (stderr marked) and the record
    folder = run_folder(project)
    assert folder.name == run_id
    log = (folder / "rank-1.log").read_text().splitlines()
    assert "hello from rank 1" in log and "[stderr] stderr line from rank 1" in log
    record = run_json(project)
    assert record["status"] == "succeeded" and record["exit_code"] == 0
    assert record["world_size"] == 2 and record["nnodes"] == 1 and record["restarts"] == 0
    assert record["failed_rank"] is None and record["error"] is None
    assert record["command"][:2] == ["accel", "launch"] and record["cwd"] == str(project)
    assert record["config"]["launch"]["mixed_precision"] == "bf16"
    for key in ("started_at", "ended_at", "hostname", "accel_version", "torch_version"):
        assert record[key], key
    assert "git_commit" in record

    # accel runs / accel logs on that run
    listed = json.loads(accel("runs", "--json").stdout)
    assert [r["id"] for r in listed] == [run_id] and listed[0]["status"] == "succeeded"
    assert run_id in accel("runs").stdout
    logs = accel("logs", "--rank", "1")
    assert "[rank1] hello from rank 1" in logs.stdout and "rank 0" not in logs.stdout
    assert logs.stderr.splitlines() == ["[rank1] stderr line from rank 1"]  # as on the console
    assert "hello from rank 0" in accel("logs", run_id[-6:], "--no-prefix").stdout
    assert_no_orphans(run_id)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_one_rank_gets_torchrun_env(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    done = accel("launch", str(SCRIPTS / "env_dump.py"), str(out))
    assert done.returncode == 0, done.stderr
    env = json.loads((out / "rank-0.json").read_text())["env"]
    assert all(name in env for name in TORCHRUN_VARS)
    assert env["WORLD_SIZE"] == "1" and "OMP_NUM_THREADS" not in env


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_failing_rank_stops_the_others(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    started = time.monotonic()
    done = accel(
        "launch",
        "-n",
        "3",
        "--stop-grace-period",
        "5s",
        str(SCRIPTS / "sleeper.py"),
        str(out),
        "--fail-rank",
        "1",
    )
    assert time.monotonic() - started < 30
    assert done.returncode == 1
    assert "[rank1] RuntimeError: deliberate failure on rank 1" in done.stderr  # a traceback
    assert "in fail_here" in done.stderr and "runpy" not in done.stderr
    assert "rank 1 failed first: RuntimeError: deliberate failure on rank 1" in done.stderr
    assert "rank(s) 0, 2 were stopped by accel after rank 1 failed" in done.stderr
    record = run_json(project)
    assert record["status"] == "failed" and record["exit_code"] == 1
    assert record["failed_rank"] == 1 and record["stopped_ranks"] == [0, 2]
    assert record["also_failed_ranks"] == []
    assert record["error"]["type"] == "RuntimeError"
    assert "fail_here" in record["error"]["traceback"]
    assert_no_orphans(record["id"])
    for r in (0, 1, 2):  # grandchildren too
        worker, child = map(int, (out / f"ready-{r}").read_text().split())
        assert not pid_alive(worker) and not pid_alive(child)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_quiet_console_still_shows_the_failure(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    done = accel(
        "launch", "-n", "2", "--quiet", str(SCRIPTS / "sleeper.py"), str(out), "--fail-rank", "1"
    )
    assert done.returncode == 1
    assert "ready" not in done.stdout
    assert "RuntimeError: deliberate failure on rank 1" in done.stderr
    assert "in fail_here" in done.stderr


def _start_sleepers(start_accel: StartAccel, project: Path, *extra: str) -> subprocess.Popen[str]:
    out = project / "out"
    out.mkdir()
    proc = start_accel(
        "launch", "-n", "2", *extra[:2], str(SCRIPTS / "sleeper.py"), str(out), *extra[2:]
    )
    wait_for(lambda: all((out / f"ready-{r}").exists() for r in (0, 1)), 30, "workers to start")
    return proc


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_the_run(
    start_accel: StartAccel, project: Path, sig: signal.Signals, code: int
) -> None:
    # rank 1 ignores SIGTERM: it is SIGKILLed once the grace period is over
    proc = _start_sleepers(
        start_accel, project, "--stop-grace-period", "1s", "--ignore-term-rank", "1"
    )
    follower = start_accel("logs", "--follow")  # a live run: follows it to its end
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert time.monotonic() - sent < 10
    record = run_json(project)
    assert record["status"] == "interrupted" and record["exit_code"] == code
    assert_no_orphans(record["id"])
    followed, follow_err = follower.communicate(timeout=10)
    assert "[rank0] rank 0 ready" in followed and "[rank1] rank 1 ready" in followed
    assert f"interrupted, exit code {code}" in follow_err


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_second_ctrl_c_kills_at_once(start_accel: StartAccel, project: Path) -> None:
    # Both ranks ignore SIGINT and rank 1 SIGTERM too: only a SIGKILL ends rank 1, and
    # the grace period (60 s) is longer than the test may take.
    proc = _start_sleepers(
        start_accel,
        project,
        *("--stop-grace-period", "60s", "--ignore-int", "--ignore-term-rank", "1"),
    )
    assert proc.stderr is not None
    proc.send_signal(signal.SIGINT)
    seen = []
    for line in proc.stderr:  # accel says what it waits for before the second Ctrl-C
        seen.append(line)
        if "Ctrl-C again" in line:
            break
    waiting = "accel: stopping the workers (up to 60s); Ctrl-C again to kill them now\n"
    assert waiting in seen, "".join(seen)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=20)  # not the grace period again
    assert proc.returncode == 130, "".join(seen) + rest
    assert seen.count(waiting) == 1 and waiting not in rest
    record = run_json(project)
    assert record["status"] == "interrupted" and record["exit_code"] == 130
    assert_no_orphans(record["id"])


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sigkill_of_the_launcher_leaves_nothing(
    start_accel: StartAccel, project: Path, accel_exe: list[str]
) -> None:
    proc = _start_sleepers(start_accel, project, "--stop-grace-period", "1s")
    run_id = run_folder(project).name
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert_no_orphans(run_id, timeout=5)
    listed = subprocess.run(
        [*accel_exe, "runs", "--json"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert json.loads(listed.stdout)[0]["status"] == "crashed"
    assert run_json(project)["status"] == "crashed"  # healed in run.json by `accel runs`
    check = subprocess.run(
        [*accel_exe, "env", "--check"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_restart_after_failure(accel: Accel, project: Path) -> None:
    done = accel("launch", "-n", "2", "--max-restarts", "1", str(SCRIPTS / "flaky.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restarting the workers (restart 1 of 1)" in done.stderr
    record = run_json(project)
    assert record["status"] == "succeeded" and record["restarts"] == 1
    # Rank 0 (a no-op) may still be running when rank 1 fails: then it is listed too,
    # as stopped. The one that failed is rank 1, whatever the timing.
    failed = [f for f in record["attempts"][0]["failures"] if f["fate"] == "failed"]
    assert [(f["rank"], f["exitcode"]) for f in failed] == [(1, 3)]
    log = (run_folder(project) / "rank-1.log").read_text()
    assert log.index("attempt 0") < log.index("restart 1") < log.index("attempt 1")


@pytest.mark.slow
@pytest.mark.edge  # torch's env:// store per release (TORCHELASTIC_USE_AGENT_STORE)
@pytest.mark.timeout(120)
def test_a_script_that_starts_its_own_group_meets_on_a_fresh_store_each_attempt(
    accel: Accel, project: Path, tmp_path: Path
) -> None:
    """With restarts, the launcher hosts each attempt's store (agent.AttemptStore): the
    ranks of a script that calls init_process_group itself find it listening."""
    script = str(SCRIPTS / "store_per_attempt.py")
    done = accel("launch", "-n", "2", "--max-restarts", "1", script, str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    given = {
        (attempt, rank): json.loads((tmp_path / f"attempt-{attempt}-rank-{rank}.json").read_text())
        for attempt in (0, 1)
        for rank in (0, 1)
    }
    assert {g["TORCHELASTIC_USE_AGENT_STORE"] for g in given.values()} == {"True"}
    assert {g["gathered"] == [0, 1] for g in given.values()} == {True}
    ports = [{given[(attempt, rank)]["MASTER_PORT"] for rank in (0, 1)} for attempt in (0, 1)]
    assert len(ports[0]) == len(ports[1]) == 1  # one store an attempt, for every rank
    assert ports[0] != ports[1]  # a fresh one: no key of the dead attempt's is in it


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_module_mode(accel: Accel, project: Path) -> None:
    (project / "mymod.py").write_text(
        "import sys\nif __name__ == '__main__':\n    print('module ran', sys.argv[1:])\n"
    )
    done = accel("launch", "-m", "mymod", "--a", "1")
    assert done.returncode == 0, done.stderr
    assert "[rank0] module ran ['--a', '1']" in done.stdout


def _daemon(out: Path, rank: int = 0) -> int:
    pid, marked = map(int, (out / f"daemon-{rank}").read_text().split())
    assert not marked  # invisible to a scan of environments
    return pid


@pytest.fixture
def out(project: Path) -> Path:
    folder = project / "out"
    folder.mkdir()
    return folder


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_daemon_started_by_a_worker_ends_with_the_run(accel: Accel, out: Path) -> None:
    done = accel("launch", str(SCRIPTS / "daemonizer.py"), str(out))
    assert done.returncode == 0, done.stderr
    assert "left a daemon" in done.stdout
    pid = _daemon(out)
    wait_for(lambda: not pid_alive(pid), 5, f"the daemon {pid} to be ended with its run")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_daemon_started_by_a_worker_ends_when_the_launcher_is_killed(
    start_accel: StartAccel, out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"  # where the launcher makes its private folders
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    proc = start_accel("launch", "-n", "2", str(SCRIPTS / "daemonizer.py"), str(out), "--stay")
    wait_for(lambda: all((out / f"daemon-{r}").exists() for r in (0, 1)), 30, "the daemons")
    daemons = [_daemon(out, r) for r in (0, 1)]
    wait_for_guard_rounds(proc.pid)  # the guard has seen them
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for pid in daemons:
        wait_for(lambda pid=pid: not pid_alive(pid), 5, f"the daemon {pid} to be ended")
    # the guard also removes the launcher's scratch (log FIFOs; under preload its socket)
    wait_for(lambda: not any(scratch.iterdir()), 5, "the launcher's scratch to be removed")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_no_process_outlives_a_sigkill_of_the_launchers_whole_process_group(
    accel_exe: list[str], project: Path, out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell's `kill -9 %1`: the job's whole process group, guard's group included."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    command = [*accel_exe, "launch", "-n", "2", str(SCRIPTS / "daemonizer.py"), str(out), "--stay"]
    # a job of its own, as a shell starts it: the launcher leads its process group
    proc = subprocess.Popen(command, cwd=project, stdout=subprocess.DEVNULL, start_new_session=True)
    daemons: list[int] = []
    try:
        wait_for(lambda: all((out / f"daemon-{r}").exists() for r in (0, 1)), 60, "the daemons")
        daemons = [_daemon(out, r) for r in (0, 1)]
        wait_for_guard_rounds(proc.pid)
        run = tree(proc.pid)  # workers, (shims, template,) daemons and the guard
        assert set(daemons) <= set(run)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert_gone(run, 15)
        assert_no_orphans(run_folder(project).name)  # nothing with its ACCEL_RUN_ID either
        wait_for(lambda: not any(scratch.iterdir()), 10, "the launcher's scratch to be removed")
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pid in daemons:  # a failed run of this test leaves nothing sleeping either
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_script_with_torchs_record_is_reported_as_one_without(
    accel: Accel, project: Path
) -> None:
    """torch's @record writes the error file itself ("ValueError: ..."): the summary
    dropped the exception and the traceback printed twice (issue 29)."""
    done = accel("launch", "-n", "2", str(SCRIPTS / "record_fails.py"))
    assert done.returncode == 1
    assert "rank 1 failed first: ValueError: bad learning rate 7" in done.stderr
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr
    (run_json,) = (project / ".accelerate" / "logs" / "runs").glob("*/run.json")
    failures = json.loads(run_json.read_text())["attempts"][0]["failures"]
    (ours,) = [f for f in failures if f["rank"] == 1]
    assert (ours["type"], ours["message"]) == ("ValueError", "bad learning rate 7")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_error_file_cut_short_is_a_failure_not_a_launcher_crash(
    accel: Accel, project: Path
) -> None:
    """torch parses a failed worker's error file and raises on one that is not JSON: a
    worker stopped while it wrote the file (rank 0 as the launcher stops it after rank 1
    died, seen under load) ended the launcher with an internal error."""
    done = accel(
        "launch", "-n", "2", "--stop-grace-period", "2s", str(SCRIPTS / "torn_error_file.py")
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "unexpected" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "rank 1 failed first" in done.stderr, done.stderr
    record = run_json(project)
    assert record["status"] == "failed" and record["failed_rank"] == 1, record
