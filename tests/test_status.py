"""``accel status``: sizes per part, live runs, the largest and oldest items, tree and JSON."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel.cli import _output
from accel.cli.main import main
from accel.runs import run_lock
from accel.store.entry import CacheMeta, write_cache_meta
from accel.store.hashing import FileDigest, digest_bytes
from accel.store.manifest import Manifest, write_manifest
from accel.workspace import Workspace

DAY = 86400.0


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["status", *args])
    return code, capsys.readouterr().out


def populate(project: Path) -> Workspace:
    ws = Workspace(project / ".accelerate").ensure()
    now = time.time()
    for name, size, age in (("small", 10, 1), ("big", 5000, 2), ("ancient", 20, 400)):
        folder = ws.cache_dir / "entries" / f"{name}.entry"
        folder.mkdir(parents=True)
        (folder / "value.bin").write_bytes(b"v" * size)
        when = now - age * DAY
        meta = CacheMeta(
            name, "bytes", "value.bin", size, digest_bytes(b"v" * size), when, when, None
        )
        write_cache_meta(folder, meta)
    step = ws.checkpoints_dir / "main" / "step-000000000001"
    step.mkdir(parents=True)
    (step / "state.tensors").write_bytes(b"m" * 3000)
    model = FileDigest(3000, digest_bytes(b"m" * 3000))
    write_manifest(
        step, Manifest("main", 1, now - 3 * DAY, None, None, 1, {"state.tensors": model})
    )
    run = ws.runs_dir / "20260101-000000-abcdef"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"id": run.name, "status": "running"}))
    (run / "rank-0.log").write_bytes(b"r" * 700)
    (ws.logs_dir / "training.log").write_bytes(b"t" * 50)
    return ws


def test_json_for_a_workspace_not_created_yet(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = status(capsys, "--json")
    data = json.loads(out)
    assert code == 0 and data["exists"] is False and data["total_size"] == 0
    assert data["live_runs"] == [] and data["largest"] == [] and data["oldest"] == []
    assert not (project / ".accelerate").exists()


def test_json_sizes_live_runs_largest_and_oldest(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = populate(project)
    with run_lock(ws.layout, "20260101-000000-abcdef"):
        code, out = status(capsys, "--json")
    data = json.loads(out)
    assert code == 0 and data["config_valid"] is True
    assert set(data["sizes"]) == {"config", "cache", "checkpoints", "logs", "runs", "state"}
    assert data["sizes"]["runs"] >= 700 and data["sizes"]["logs"] == 50
    assert data["sizes"]["cache"] >= 5030 and data["sizes"]["checkpoints"] >= 3000
    assert data["live_runs"] == ["20260101-000000-abcdef"]
    assert [i["name"] for i in data["largest"][:3]] == [
        "big",
        "main/step-000000000001",
        "20260101-000000-abcdef",
    ]
    assert data["oldest"][0]["name"] == "ancient" and data["oldest"][0]["category"] == "cache"
    assert set(data["largest"][0]) == {"category", "kind", "name", "path", "size", "last_used"}


def test_plain_text_without_a_terminal(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    populate(project)
    code, out = status(capsys)
    assert code == 0 and "\x1b[" not in out
    assert "live runs  none" in out and "largest    cache: big" in out
    assert "oldest     cache: ancient" in out


def test_a_tree_on_a_terminal(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    populate(project)
    screen = io.StringIO()
    fake = Console(file=screen, force_terminal=True, width=120, color_system=None)
    monkeypatch.setattr(_output, "is_terminal", lambda: True)
    monkeypatch.setattr(_output, "console", lambda stderr=False: fake)
    assert main(["status"]) == 0
    text = screen.getvalue()
    assert "├── config: valid" in text and "└── oldest" in text
    assert "│   ├── cache: " in text and "live runs: 0" in text


def test_an_invalid_config_is_a_warning_and_the_workspace_is_still_shown(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = populate(project)
    ws.config_file.write_text("cache:\n  max_size: 10QB\n")
    code, out = status(capsys, "--json")
    data = json.loads(out)
    assert code == 0 and data["config_valid"] is False and "10QB" in data["config_error"]
    assert data["sizes"]["cache"] > 0 and data["largest"]
    # the command that repairs it, as `accel env --check` names it
    assert data["config_fix"] == "accel config unset cache.max_size"
    assert main(["status"]) == 0
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if "10QB" in line]
    assert warning.endswith("(fix: `accel config unset cache.max_size`)"), warning


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_status_and_clean_never_import_torch_nor_yaml_without_a_config(project: Path) -> None:
    """yaml (16-25 ms of a start-up) is imported with the first config file read: in a
    project without one, never; with one, its values are read as before."""
    ws = populate(project)
    script = (
        "import sys\n"
        "from accel.cli.main import main\n"
        "assert main(['status']) == 0\n"
        "assert main(['status', '--json']) == 0\n"
        "assert main(['clean', '--older-than', '1d', '--dry-run']) == 0\n"
        "assert main(['clean', '--dry-run', '--json']) == 0\n"
        "print('torch' in sys.modules, 'yaml' in sys.modules, file=sys.stderr)\n"
        f"open({str(ws.config_file)!r}, 'w').write('launch:\\n  num_processes: 3\\n')\n"
        "assert main(['config', 'get', 'launch.num_processes']) == 0\n"
        "print('torch' in sys.modules, 'yaml' in sys.modules, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-2:] == ["False False", "False True"]
    assert result.stdout.strip().splitlines()[-1] == "3"
