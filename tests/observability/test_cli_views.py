"""The command bodies of ``accel runs show``, ``accel runs plot`` and ``accel stack``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from accel import hang, runs
from accel.cli import runs_view
from accel.cli import stack as stack_cmd
from accel.errors import UsageError
from accel.runs import plot as plotting
from accel.workspace import Workspace
from run_helpers import write_run

RUN_ID = "20261129-100000-aaaaaa"


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("show")(runs_view.show)
    app.command("plot")(runs_view.plot)
    app.command("stack")(stack_cmd.stack)
    return app


def _run(ws: Workspace, run_id: str = RUN_ID, **raw: object) -> Path:
    record = {
        "config": {"launch": {"num_processes": 2}},
        "error": {"rank": 1, "type": "ValueError", "message": "bad [batch]"},
        "hostname": socket.gethostname(),
        **raw,
    }
    metrics = [{"step": s, "time": 100.0 + s, "rank": 0, "loss": 1 / (s + 1)} for s in range(30)]
    samples = [
        {
            "time": 100.0 + i,
            "ranks": {"0": {"pid": 1, "cpu_percent": 50.0 + i, "rss_bytes": 2**30, "threads": 4}},
        }
        for i in range(5)
    ]
    return write_run(ws, run_id, record, metrics, samples)


def test_show_prints_summary_ranks_resources_and_metrics(ws: Workspace) -> None:
    _run(ws)
    result = CliRunner().invoke(_app(), ["show"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"run {RUN_ID} (default)" in out and "failed (exit 1) after 5m 30s" in out
    assert "rank 1: ValueError: bad [batch]" in out
    assert "config    launch.num_processes: 2 (now 1)\n\nranks" in out
    assert "resources (5 samples)" in out and "54%" in out and "1.0 GiB" in out
    assert "loss" in out and "0.03333" in out and "(min) @ 29" in out and "█" in out


def test_logs_of_a_rank_the_run_has_no_log_of_say_which_ranks_it_has(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """`accel logs --rank 9` of a 2-rank run warned and exited 0, as if rank 9 had
    printed nothing: a rank that is not there is bad input, as a step that is not."""
    from accel.cli.main import main

    folder = _run(ws)
    for r in (0, 1):
        (folder / f"rank-{r}.log").write_text(f"hello from {r}\n")
    capsys.readouterr()
    assert main(["logs", "--rank", "9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: run {RUN_ID} has no log of rank 9; its logs here: ranks 0, 1", err
    assert main(["logs", "--rank", "1", "--rank", "9", "--no-prefix"]) == 0
    out, err = capsys.readouterr()
    assert out == "hello from 1\n" and "no log of rank 9; its logs here: ranks 0, 1" in err


def test_following_a_rank_that_will_never_log_is_refused_too(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """`accel logs -f --rank 9` printed nothing and exited 0 for a finished run, and
    waited silently to the end of a live one."""
    from accel import runs
    from accel.cli.main import main

    folder = _run(ws)
    (folder / "rank-0.log").write_text("hello from 0\n")
    capsys.readouterr()
    assert main(["logs", "-f", "--rank", "9"]) == 2
    assert "has no log of rank 9; its logs here: ranks 0" in capsys.readouterr().err
    live = _run(ws, "20261129-110000-bbbbbb", status="running", exit_code=None)
    (live / "rank-0.log").write_text("hello from 0\n")
    with runs.run_lock(ws.layout, "20261129-110000-bbbbbb"):  # as its launcher holds it
        assert main(["logs", "bbbbbb", "-f", "--rank", "5"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == "error: run 20261129-110000-bbbbbb has 2 rank(s), 0 to 1: no rank 5", err


def test_a_scripts_metrics_outside_a_launch_are_no_crashed_run(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script run with plain `python` logs into logs/runs/local/, which has no run.json:
    `accel runs` listed it as crashed and `runs show` blamed the current config."""
    import accel
    from accel.cli.main import main

    acc = accel.Accelerator()
    for step in range(3):
        acc.log({"loss": 1.0 / (step + 1)}, step=step)
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["status"]) == ("local", "outside accel launch")
    assert main(["runs", "show", "local"]) == 0
    out = capsys.readouterr().out
    assert "status    outside accel launch" in out and "crashed" not in out
    assert "config    (not recorded: no launch recorded this run)" in out


def test_show_json_is_the_view(ws: Workspace) -> None:
    _run(ws)
    result = CliRunner().invoke(_app(), ["show", "aaaaaa", "--json"])
    data = json.loads(result.output)
    assert data["id"] == RUN_ID and data["metrics"][0]["name"] == "loss"
    assert data["resources"]["ranks"]["0"]["cpu_percent"]["peak"] == 54.0


@pytest.mark.slow
def test_plot_writes_every_metric_and_the_resources(ws: Workspace, project: Path) -> None:
    pytest.importorskip("matplotlib")
    _run(ws)
    _run(ws, "20261129-110000-bbbbbb")
    result = CliRunner().invoke(_app(), ["plot", "aaaaaa", "bbbbbb", "-o", "cmp.png"])
    assert result.exit_code == 0, result.output
    drawn = {(s["panel"], s["label"]) for s in plotting.read_png_series(project / "cmp.png")}
    assert ("loss", RUN_ID) in drawn and ("loss", "20261129-110000-bbbbbb") in drawn
    assert ("CPU %", f"{RUN_ID} rank 0") in drawn
    one = ["plot", "aaaaaa", "bbbbbb", "-m", "loss", "--no-resources", "-o", "one.png"]
    result = CliRunner().invoke(_app(), one)  # the docs' example: one panel, two lines
    assert result.exit_code == 0 and "wrote one.png (1 panel, 2 series)" in result.output
    result = CliRunner().invoke(_app(), ["plot", "-m", "acc"])
    assert isinstance(result.exception, UsageError) and "loss" in str(result.exception)


@pytest.fixture
def stuck_worker(ws: Workspace) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    folder = _run(ws, status="running", ended_at=None)
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(hang.__file__).parents[2])!r})\n"
        "from accel.hang import install_stack_dump_handler\n"
        "install_stack_dump_handler()\n"
        "def waiting_for_allreduce():\n    print('ready', flush=True); time.sleep(60)\n"
        "waiting_for_allreduce()\n"
    )
    env = {**os.environ, "ACCEL_RUN_DIR": str(folder), "RANK": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield folder, proc
    proc.kill()
    proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_stack_dumps_a_live_run_into_the_output_and_the_rank_log(
    ws: Workspace, stuck_worker: tuple[Path, subprocess.Popen[str]]
) -> None:
    folder, proc = stuck_worker
    result = CliRunner().invoke(_app(), ["stack"])
    assert isinstance(result.exception, UsageError) and "not running" in str(result.exception)
    with runs.run_lock(ws.layout, RUN_ID):
        result = CliRunner().invoke(_app(), ["stack"])
        assert "no workers yet" in str(result.exception)
        hang.write_workers(folder, 0, {0: proc.pid})
        _run(ws, "20261129-120000-cccccc")  # a newer run, ended: the live one is meant
        result = CliRunner().invoke(_app(), ["stack"])
    assert result.exit_code == 0, result.output
    assert f"===== rank 0 (pid {proc.pid}) =====" in result.output
    assert "waiting_for_allreduce" in result.output
    log = (folder / "rank-0.log").read_text()
    assert "accel stack" in log and "waiting_for_allreduce" in log
    assert proc.poll() is None
