"""Observability through the installed ``accel``: real launches, real signals, CPU only."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from accel.runs import plot as plotting
from run_helpers import Start, run_folder, wait_for

SCRIPTS = Path(__file__).resolve().parent / "scripts"
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("args", [(), ("silent",)])
def test_hang_timeout_dumps_the_stuck_function_and_kills_like_a_failure(
    accel: Run, project: Path, args: tuple[str, ...]
) -> None:
    done = accel(
        "launch",
        "-n",
        "2",
        "--hang-timeout",
        "5s",
        "--hang-action",
        "kill",
        # silent: restarted once, and the restart's line names every stuck rank too
        *(("--max-restarts", "1") if args else ()),
        str(SCRIPTS / "stuck.py"),
        *args,
    )
    assert done.returncode == 1, done.stderr
    screen = done.stdout + done.stderr
    assert "hang" in screen and "stuck_in_named_function" in screen
    folder = run_folder(project)
    for rank in (0, 1):
        log = (folder / f"rank-{rank}.log").read_text()
        assert "hang detected" in log and "stuck_in_named_function" in log
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "hung" and record["exit_code"] == 1
    hangs = record["hangs"]
    assert len(hangs) == (2 if args else 1) and record["restarts"] == len(hangs) - 1
    hang = hangs[-1]
    assert hang["action"] == "kill"
    # Both sleep outside a collective: those quiet the longest are stuck (silent: both,
    # quiet since their start), and every report names them all.
    stuck = record["stuck_ranks"]
    assert hang["stuck"] == stuck and (stuck == [0, 1] or not args)
    where = "stuck in stuck_in_named_function (stuck.py), not in a collective"
    named = f"ranks {', '.join(map(str, stuck))} are" if len(stuck) > 1 else f"rank {stuck[0]} is"
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert f"(--hang-action kill): {named} {where}" in said
    if args:  # it named rank 0 alone
        assert f"accel: {named} {where}; restarting the workers (restart 1 of 1)" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_hang_warn_dumps_stacks_and_lets_the_run_finish(accel: Run, project: Path) -> None:
    done = accel("launch", "--hang-timeout", "1s", str(SCRIPTS / "quiet_until_dumped.py"))
    assert done.returncode == 0, done.stderr
    assert "looks hung" in done.stderr and "quiet_phase" in done.stderr
    assert "[rank0] resumed" in done.stdout
    record = json.loads((run_folder(project) / "run.json").read_text())
    assert record["status"] == "succeeded" and record["hangs"][0]["action"] == "warn"


@pytest.fixture
def live_run(start_accel: Start) -> subprocess.Popen[str]:
    return start_accel("launch", "-n", "2", str(SCRIPTS / "stuck.py"))


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_accel_stack_on_a_live_run(
    accel: Run, project: Path, live_run: subprocess.Popen[str]
) -> None:
    runs_dir = project / ".accelerate" / "logs" / "runs"
    wait_for(lambda: runs_dir.is_dir() and any(runs_dir.iterdir()), 30, "the run folder")
    folder = run_folder(project)

    def started() -> bool:
        logs = [folder / f"rank-{r}.log" for r in (0, 1)]
        return (folder / "workers.json").exists() and all(
            p.exists() and "started" in p.read_text() for p in logs
        )

    wait_for(started, 60, "both ranks to start")
    done = accel("stack")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("stuck_in_named_function") == 2
    assert "===== rank 0 (pid" in done.stdout and "===== rank 1 (pid" in done.stdout
    as_json = json.loads(accel("stack", "--json").stdout)
    assert set(as_json) == {"0", "1"} and "stuck_in_named_function" in as_json["1"]["stack"]
    assert "accel stack" in (folder / "rank-1.log").read_text()
    live_run.send_signal(signal.SIGTERM)
    assert live_run.wait(timeout=30) == 143


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_metrics_resources_show_plot_and_log_filters(accel: Run, project: Path) -> None:
    done = accel(
        "launch",
        "-n",
        "2",
        str(SCRIPTS / "train_metrics.py"),
        env={"ACCEL_LOGS_RESOURCE_INTERVAL": "0.2s"},
    )
    assert done.returncode == 0, done.stderr
    folder = run_folder(project)

    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    main = [x for x in lines if "loss" in x]
    assert [x["step"] for x in main] == list(range(12)) and {x["rank"] for x in main} == {0}
    assert main[3]["loss"] == 0.25 and all(x["time"] > 0 for x in main)
    spread = [x for x in lines if "rank_value" in x]
    assert sorted({(x["rank"], x["rank_value"]) for x in spread}) == [(0, 0.0), (1, 1.0)]
    assert len(spread) == 24
    if importlib.util.find_spec("tensorboard") is not None:
        events = list((folder / "tensorboard").glob("rank-*/events.out.tfevents.*"))
        assert {e.parent.name for e in events} == {"rank-0", "rank-1"}

    samples = [json.loads(x) for x in (folder / "resources.jsonl").read_text().splitlines()]
    assert len(samples) >= 2
    for sample in samples:
        for stats in sample["ranks"].values():
            assert 2**20 < stats["rss_bytes"] < 8 * 2**30 and stats["threads"] >= 1
            assert 0 <= stats["cpu_percent"] <= 1000
    record = json.loads((folder / "run.json").read_text())
    summary = record["resources"]
    assert summary["samples"] == len(samples) and set(summary["ranks"]) <= {"0", "1"}
    assert summary["ranks"]["0"]["rss_bytes"]["peak"] >= summary["ranks"]["0"]["rss_bytes"]["mean"]

    show = accel("runs", "show")
    assert show.returncode == 0, show.stderr
    assert "succeeded (exit 0)" in show.stdout and "resources (" in show.stdout
    assert "loss" in show.stdout and "0.08333" in show.stdout and "(min) @ 11" in show.stdout

    plot = accel("runs", "plot", "--metric", "loss", "--metric", "lr", "-o", "loss.png")
    assert plot.returncode == 0, plot.stderr
    png = (project / "loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    drawn = {(s["panel"], s["points"]) for s in plotting.read_png_series(project / "loss.png")}
    assert ("loss", 12) in drawn and ("lr", 12) in drawn
    assert any(panel == "CPU %" for panel, _ in drawn)

    grep = accel("logs", "--grep", r"loss=0\.0833", "--no-prefix")
    assert grep.stdout.splitlines() == ["step 11 loss=0.0833"] * 2
    assert accel("logs", "--since", "1h").stdout.count("step 0 loss") == 2
    assert accel("logs", "--since", "2026-01-01T00:00:00+00:00").returncode == 0
    assert "invalid --grep" in accel("logs", "--grep", "(").stderr
