"""A pull trusts nothing it pulls: only known files in known places, a config written
aside, never into a live series, every malformed object refused with a clean exit 1,
and nothing half-visible after a refusal or an interruption."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sync_helpers import Interrupt, finished_run, forge, remote_json, save_checkpoints, tree

from accel import Workspace
from accel.cli.main import main
from accel.sync import open_remote, pull

pytestmark = pytest.mark.timeout(120)
RUN = "20261129-150000-aaaaaa"
STEP = "checkpoints/default/step-000000000002"


@pytest.fixture
def pushed(ws: Workspace, remote_url: str) -> Workspace:
    save_checkpoints(ws, (1, 2))
    finished_run(ws, RUN)
    ws.cache.put("ns/blob", b"payload" * 100)
    assert main(["sync", "push", remote_url, "--include-cache"]) == 0
    return ws


@pytest.fixture
def fresh(ws: Workspace) -> Workspace:
    return Workspace(ws.path.parent / "clone" / ".accelerate")


def pull_cli(
    fresh: Workspace, url: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["--workspace", str(fresh.path), "sync", "pull", url, *extra])
    return code, capsys.readouterr().err


# -- the attack: a remote that plants code for the next launch ---------------------------


@pytest.mark.slow
def test_a_remote_cannot_run_code_on_the_next_launch(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    accel_exe: list[str],
) -> None:
    marker = fresh.path.parent / "pwned"
    planted = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    forge(remote_dir, f"logs/runs/{RUN}/sitecustomize.py", planted.encode())
    config = f"version: 1\nlaunch:\n  env:\n    PYTHONPATH: .accelerate/logs/runs/{RUN}\n"
    forge(remote_dir, "config/accelerate_config.yaml", config.encode())

    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config")
    assert code == 1
    assert f"logs/runs/{RUN}/sitecustomize.py: refused: not a file accel writes" in err
    assert "config/accelerate_config.yaml: the remote's config was refused" in err
    assert "PYTHONPATH" in err and "Traceback" not in err
    assert not (fresh.runs_dir / RUN / "sitecustomize.py").exists()
    assert (fresh.runs_dir / RUN / "run.json").is_file()  # the rest of the run came
    assert not list(fresh.config_file.parent.glob("*.yaml"))  # neither aside nor in place

    script = fresh.path.parent / "t.py"
    script.write_text("print('trained')\n")
    done = subprocess.run(
        [*accel_exe, "--workspace", str(fresh.path), "launch", "--cpu", str(script)],
        cwd=fresh.path.parent,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("state.bin", "no part of a workspace that sync pulls"),
        ("scripts/evil.py", "no part of a workspace that sync pulls"),
        ("cache/frameworks/triton/x/kernel.py", "framework caches hold compiled code"),
        (f"logs/runs/{RUN}/stacks/evil.py", "not a file accel writes in a run folder"),
        ("logs/runs/not-a-run-id/run.json", "not in a run folder"),
        (f"{STEP}/sub/state.pt", "not a file of a checkpoint"),
        ("cache/entries/ns/blob.entry/deeper/x", "not a file of a cache entry"),
    ],
)
def test_unknown_files_and_places_are_refused_and_listed(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    rel: str,
    reason: str,
) -> None:
    forge(remote_dir, rel, b"import os; os.system('touch /tmp/pwned')\n")
    capsys.readouterr()
    argv = ["--workspace", str(fresh.path), "sync", "pull", remote_url, "--include-cache"]
    assert main([*argv, "--json"]) == 1
    refused = {r["unit"]: r["reason"] for r in json.loads(capsys.readouterr().out)["refused"]}
    assert reason in refused[rel], refused
    assert not (fresh.path / rel).exists() and not (fresh.runs_dir.parent / rel).exists()
    assert [c.step for c in fresh.checkpoints.list()] == [1, 2]  # the rest still came
    assert fresh.cache.get("ns/blob") == b"payload" * 100
    code, err = pull_cli(fresh, remote_url, capsys, "--include-cache")
    line = next(line for line in err.splitlines() if line.startswith(f"error: {rel}: refused: "))
    assert code == 1 and reason in line


# -- the config ---------------------------------------------------------------------------


def test_a_pulled_config_goes_aside_and_applies_with_its_difference_keeping_secrets(
    ws: Workspace,
    fresh: Workspace,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws.config_file.write_text(
        "version: 1\nlaunch:\n  num_processes: 4\n  env:\n    HF_TOKEN: theirs-secret-1\n"
        "    A: remote\n"
    )
    assert main(["sync", "push", remote_url]) == 0
    fresh.ensure()
    fresh.config_file.write_text("version: 1\nlaunch:\n  env:\n    HF_TOKEN: mine-secret-2\n")
    mine = fresh.config_file.read_bytes()

    code, err = pull_cli(fresh, remote_url, capsys)
    assert code == 0 and fresh.config_file.read_bytes() == mine  # never replaced silently
    aside = fresh.config_file.with_name("accelerate_config.pulled.yaml")
    assert "theirs-secret-1" not in aside.read_text()  # the push uploaded it redacted
    assert "--apply-config" in err

    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config")
    assert code == 0 and not aside.exists()
    assert "+  num_processes: 4" in err and "mine-secret-2" not in err
    applied = Workspace(fresh.path).config
    assert applied["launch.num_processes"] == 4
    assert applied["launch.env"] == {"HF_TOKEN": "mine-secret-2", "A": "remote"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("launch:\n  env:\n    LD_PRELOAD: /tmp/x.so\n", "LD_PRELOAD"),
        ("launch:\n  env:\n    PYTHONSTARTUP: x.py\n    PATH: /tmp\n", "PATH, PYTHONSTARTUP"),
        ("workspace:\n  path: /home/victim\n", "workspace.path"),
        ("launch:\n  num_processes: " + "9" * 400 + "\n", "not valid"),
        ("launch: [" * 100 + "\n", "not valid"),
    ],
)
def test_a_hostile_config_is_refused(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    text: str,
    reason: str,
) -> None:
    forge(remote_dir, "config/accelerate_config.yaml", ("version: 1\n" + text).encode())
    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config")
    assert code == 1 and reason in err and "unexpected" not in err
    assert not list(fresh.config_file.parent.glob("*.yaml"))


# -- malformed objects --------------------------------------------------------------------


def _manifest_without(remote_dir: Path, key: str) -> None:
    manifest = remote_json(remote_dir, f"{STEP}/manifest.json")
    del manifest[key]
    forge(remote_dir, f"{STEP}/manifest.json", json.dumps(manifest).encode())


def _manifest_of_series(remote_dir: Path, series: str) -> None:
    manifest = remote_json(remote_dir, f"{STEP}/manifest.json")
    manifest["series"] = series
    forge(remote_dir, f"{STEP}/manifest.json", json.dumps(manifest).encode())


def _cache_meta(remote_dir: Path, **changes: object) -> None:
    rel = "cache/entries/ns/blob.entry/meta.json"
    forge(remote_dir, rel, json.dumps({**remote_json(remote_dir, rel), **changes}).encode())


@pytest.mark.parametrize(
    ("damage", "unit", "message"),
    [
        (lambda d: _manifest_without(d, "created"), STEP, "not one accel can read"),
        (lambda d: _manifest_of_series(d, "other"), STEP, "names the series 'other'"),
        (lambda d: _cache_meta(d, payload="/etc/passwd"), "cache/entries/ns/blob.entry", "payload"),
        (lambda d: _cache_meta(d, payload="../../x"), "cache/entries/ns/blob.entry", "payload"),
        (lambda d: _cache_meta(d, key="other"), "cache/entries/ns/blob.entry", "for the key"),
        (lambda d: _cache_meta(d, size=-1), "cache/entries/ns/blob.entry", "no size and checksum"),
        (lambda d: _cache_meta(d, size=3), "cache/entries/ns/blob.entry", "does not match"),
        (
            lambda d: forge(d, f"logs/runs/{RUN}/run.json", b"[" * 100000),
            f"logs/runs/{RUN}",
            "not JSON",
        ),
        (
            lambda d: forge(d, f"logs/runs/{RUN}/run.json", b'{"id": "x"}'),
            f"logs/runs/{RUN}",
            "not the record",
        ),
        (lambda d: forge(d, f"logs/runs/{RUN}/run.json", None), f"logs/runs/{RUN}", "no run.json"),
    ],
)
def test_a_malformed_unit_is_refused_and_nothing_of_it_is_visible(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    damage: object,
    unit: str,
    message: str,
) -> None:
    damage(remote_dir)  # type: ignore[operator]
    code, err = pull_cli(fresh, remote_url, capsys, "--include-cache")
    assert code == 1, err
    line = next(line for line in err.splitlines() if line.startswith(f"error: {unit}:"))
    assert message in line and "refused" in line, err
    assert "unexpected" not in err and "Traceback" not in err
    assert [c.step for c in fresh.checkpoints.list()] == ([1] if unit == STEP else [1, 2])
    assert fresh.cache.get("ns/blob") == (None if "cache" in unit else b"payload" * 100)
    assert not any(fresh.runs_dir.iterdir()) if "runs" in unit else True
    assert not [p for p in tree(fresh.path) if p.startswith(("tmp/", "checkpoints/default/.tmp"))]
    assert main(["--workspace", str(fresh.path), "runs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in listed] == ([] if "runs" in unit else ["succeeded"])


@pytest.mark.parametrize(
    ("checksum", "message"),
    [
        ("shake_128:" + "0" * 32, "unknown checksum algorithm 'shake_128'"),
        ("xxh3_64:zz", "is not 16 hex digits"),
        ("md4:" + "0" * 32, "unknown checksum algorithm 'md4'"),
        (12, "damaged"),
    ],
)
def test_a_malformed_index_is_refused_with_a_clean_exit_1(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    checksum: object,
    message: str,
) -> None:
    index = json.loads((remote_dir / "accel-sync.json").read_text())
    index["files"][f"{STEP}/manifest.json"]["checksum"] = checksum
    (remote_dir / "accel-sync.json").write_text(json.dumps(index))
    code, err = pull_cli(fresh, remote_url, capsys)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not fresh.exists


# -- a live series, an interrupted pull ---------------------------------------------------

HOLD = """
import sys, time
from accel import Workspace
from accel.store.lease import SeriesLease
lease = SeriesLease(Workspace(sys.argv[1]).layout, "default", run_id="20261130-120000-abcdef").acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_pull_never_writes_into_a_series_a_live_run_holds(
    pushed: Workspace,
    fresh: Workspace,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fresh.ensure()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(fresh.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code, err = pull_cli(fresh, remote_url, capsys)
        assert code == 1
        lines = [line for line in err.splitlines() if "checkpoints/default" in line]
        assert len(lines) == 1 and "20261130-120000-abcdef" in lines[0], err
        assert not (fresh.checkpoints_dir / "default").exists()
        assert (fresh.runs_dir / RUN / "run.json").is_file()  # other units still came
    finally:
        holder.kill()
        holder.wait()
    code, _ = pull_cli(fresh, remote_url, capsys)
    assert code == 0 and [c.step for c in fresh.checkpoints.list()] == [1, 2]


def test_an_interrupted_run_pull_leaves_no_run_listed_as_crashed(
    ws: Workspace, fresh: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = finished_run(ws, RUN)
    (folder / "rank-0.log").write_text("line\n" * 5000)
    assert main(["sync", "push", remote_url]) == 0
    config_size = ws.config_file.stat().st_size
    with pytest.raises(KeyboardInterrupt):
        pull(fresh, open_remote(remote_url, {}, os.environ), reporter=Interrupt(config_size + 10))
    assert not fresh.runs_dir.exists() or not any(fresh.runs_dir.iterdir())
    assert not any(fresh.tmp_dir.iterdir())
    capsys.readouterr()
    assert main(["--workspace", str(fresh.path), "runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
