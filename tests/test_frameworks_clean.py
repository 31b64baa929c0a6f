"""Framework caches under ``accel clean`` (``--only frameworks``) and ``accel clean --auto``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from accel import Workspace
from accel.cli.main import main
from accel.runs import run_lock

DAY = 86400.0


def framework_cache(ws: Workspace, name: str, size: int, age_days: float = 0.0) -> Path:
    folder = ws.cache_dir / "frameworks" / name / "fxgraph" / "ab"
    folder.mkdir(parents=True)
    (folder / "entry").write_bytes(b"k" * size)
    when = time.time() - age_days * DAY
    for path in (folder / "entry", folder, folder.parent, folder.parent.parent):
        os.utime(path, (when, when))
    return ws.cache_dir / "frameworks" / name


def clean_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["clean", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_clean_only_frameworks_removes_them_and_nothing_else(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    inductor = framework_cache(ws, "inductor", 5000)
    triton = framework_cache(ws, "triton", 3000)
    ws.cache.put("keep-me", b"x" * 100)
    rc, plan = clean_json(capsys, "--only", "frameworks", "--older-than", "0s", "--dry-run")
    assert rc == 0
    assert {(i["category"], i["kind"], i["name"]) for i in plan["items"]} == {
        ("frameworks", "framework", "inductor"),
        ("frameworks", "framework", "triton"),
    }
    assert plan["total_bytes"] == 8000 and inductor.exists()
    rc, done = clean_json(capsys, "--only", "frameworks", "--older-than", "0s", "--yes")
    assert rc == 0 and done["freed_bytes"] == 8000
    assert not inductor.exists() and not triton.exists() and "keep-me" in ws.cache


def test_framework_caches_stay_while_a_run_is_live(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    inductor = framework_cache(ws, "inductor", 5000, age_days=30)
    with run_lock(ws.layout, "20261129-150000-abcdef"):
        rc, plan = clean_json(capsys, "--only", "frameworks", "--older-than", "1d", "--yes")
    assert rc == 0 and inductor.exists()
    assert plan["kept"][0]["reason"] == "a live run may be compiling into it"


def test_status_lists_framework_caches(ws: Workspace, capsys: pytest.CaptureFixture[str]) -> None:
    framework_cache(ws, "inductor", 5000)
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    found = {f["name"]: f for f in data["frameworks"]}
    assert found["inductor"]["size"] == 5000 and found["inductor"]["enabled"]
    assert found["inductor"]["variable"] == "TORCHINDUCTOR_CACHE_DIR"
    assert main(["status"]) == 0
    assert "inductor" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_clean_auto_is_a_no_op_under_budget_and_evicts_over_it(
    ws: Workspace, capsys: pytest.CaptureFixture[str], accel_exe: list[str]
) -> None:
    old = framework_cache(ws, "inductor", 50_000, age_days=10)
    new = framework_cache(ws, "triton", 50_000, age_days=1)
    out = subprocess.run([*accel_exe, "clean", "--auto"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "no cache.max_size set: nothing to do"
    ws.config_file.write_text("version: 1\ncache:\n  max_size: 1MB\n")
    out = subprocess.run([*accel_exe, "clean", "--auto"], capture_output=True, text=True)
    assert out.returncode == 0 and "fits cache.max_size" in out.stdout
    ws.config_file.write_text("version: 1\ncache:\n  max_size: 80KB\n")
    rc, dry = clean_json(capsys, "--auto", "--dry-run")
    assert rc == 0 and dry["auto"]["action"] == "trimmed" and old.exists()
    assert [i["name"] for i in dry["items"]] == ["inductor"]
    out = subprocess.run([*accel_exe, "clean", "--auto"], capture_output=True, text=True)
    assert out.returncode == 0 and "freed" in out.stdout, out
    assert not old.exists() and new.exists()
    assert "size budget" in (ws.logs_dir / "training.log").read_text()
    capsys.readouterr()
    assert main(["clean", "--auto", "--older-than", "1d"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
