"""Real processes: a live run keeps everything while cleans loop; cleans race cleans and writers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from clean_factory import DAY, age_tree, entry, workspace

from accel.workspace import Workspace

LAUNCHER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    real = time.time
    time.time = lambda: real() - 30 * 86400   # everything this run records looks old
    from accel.workspace import Workspace
    from accel.runs import run_lock
    from accel.store.lease import SeriesLease
    ws, run_id = Workspace(sys.argv[1]), sys.argv[2]
    os.environ["ACCEL_RUN_ID"] = run_id
    with run_lock(ws.layout, run_id):
        folder = ws.runs_dir / run_id
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps(
            {"id": run_id, "status": "running", "started_at": "2020-01-01T00:00:00+00:00"}))
        log = folder / "rank-0.log"
        log.write_text("start\\n")
        for i in range(3):
            ws.cache.put(f"live/{i}", b"L" * 100)
        lease = SeriesLease(ws.layout, "live", run_id).acquire()
        for step in (1, 2, 3):
            ckpt = ws.checkpoints_dir / "live" / f"step-{step:012d}"
            ckpt.mkdir(parents=True)
            (ckpt / "model.pt").write_bytes(b"m")
            (ckpt / "manifest.json").write_text(json.dumps(
                {"format": 1, "series": "live", "step": step, "created": 1.0, "files": {}}))
        old = real() - 30 * 86400
        for path in folder.iterdir():
            os.utime(path, (old, old))
        print("ready", flush=True)
        n = 0
        while not (folder / "stop").exists():
            with open(log, "a") as fh:
                fh.write(f"line {n}\\n")
            os.utime(log, (old, old))
            n += 1
            time.sleep(0.02)
        lease.release()
    """
)

DEAD_LAUNCHER = textwrap.dedent(
    """
    import json, sys, time
    from accel.workspace import Workspace
    from accel.runs import run_lock
    ws, run_id = Workspace(sys.argv[1]), sys.argv[2]
    with run_lock(ws.layout, run_id):
        folder = ws.runs_dir / run_id
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps(
            {"id": run_id, "status": "running", "started_at": "2020-01-01T00:00:00+00:00"}))
        print("ready", flush=True)
        time.sleep(600)
    """
)


def start(script: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def accel(exe: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*exe, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_live_run_keeps_running_and_keeps_its_data_while_clean_loops(
    project: Path, accel_exe: list[str]
) -> None:
    ws = workspace(project)
    live_id, dead_id = "20200101-000000-11111a", "20200101-000000-22222b"
    dead = start(DEAD_LAUNCHER, str(ws.path), dead_id)
    dead.send_signal(signal.SIGKILL)  # the record keeps saying "running"
    dead.wait()
    age_tree(ws.runs_dir / dead_id, time.time() - 30 * DAY)
    live = start(LAUNCHER, str(ws.path), live_id)
    try:
        log = ws.runs_dir / live_id / "rank-0.log"
        for _ in range(5):
            size = log.stat().st_size
            result = accel(accel_exe, "clean", "--older-than", "0s", "--keep-last", "0", "--yes")
            assert result.returncode == 0, result.stderr
            assert live.poll() is None
            _wait_for_growth(log, size)
        assert not (ws.runs_dir / dead_id).exists()
        record = json.loads((ws.runs_dir / live_id / "run.json").read_text())
        assert record["status"] == "running"
        assert [ws.cache.get(f"live/{i}") for i in range(3)] == [b"L" * 100] * 3
        steps = sorted(p.name for p in (ws.checkpoints_dir / "live").iterdir())
        assert steps == [f"step-{s:012d}" for s in (1, 2, 3)]
    finally:
        (ws.runs_dir / live_id / "stop").touch()
        live.wait(timeout=30)
    assert live.returncode == 0


def _wait_for_growth(log: Path, size: int) -> None:
    deadline = time.monotonic() + 30
    while log.stat().st_size <= size:
        assert time.monotonic() < deadline, "the live run stopped writing"
        time.sleep(0.01)


WRITER = textwrap.dedent(
    """
    import sys
    from accel.workspace import Workspace
    ws, count = Workspace(sys.argv[1]), int(sys.argv[2])
    for i in range(count):
        ws.cache.put(f"new/{i}", b"N" * (i + 1))
        assert ws.cache.get(f"new/{i // 2}") == b"N" * (i // 2 + 1)
    print("done", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_racing_cleans_and_a_writer_lose_nothing_and_crash_nothing(
    project: Path, accel_exe: list[str]
) -> None:
    ws, now = workspace(project), time.time()
    for i in range(150):
        entry(ws, f"old{i}", created=now - 30 * DAY)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(ws.path), "120"], stdout=subprocess.PIPE, text=True
    )
    cleans = [
        subprocess.Popen(
            [*accel_exe, "clean", "--older-than", "1d", "--yes", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [c.communicate(timeout=90) for c in cleans]
    assert [c.returncode for c in cleans] == [0, 0, 0], [o[1] for o in outputs]
    removed = [json.loads(o[0]).get("removed", []) for o in outputs if o[0].strip().startswith("{")]
    assert len({p for r in removed for p in r}) == sum(len(r) for r in removed) == 150
    assert writer.communicate(timeout=90)[0].strip() == "done" and writer.returncode == 0
    fresh = Workspace(ws.path)
    assert sorted(e.key for e in fresh.cache.entries()) == sorted(f"new/{i}" for i in range(120))
    assert all(fresh.cache.get(f"new/{i}") == b"N" * (i + 1) for i in range(120))
    assert os.listdir(ws.tmp_dir) == []
