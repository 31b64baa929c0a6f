"""The layout and identity modules sit on the ground floor and name what others use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from accel import layout
from accel.workspace import Workspace
from tests_paths import ROOT

GROUND_FLOOR = {
    "accel.errors",
    "accel._fs",
    "accel._locks",
    "accel._faults",
    "accel._worker_hooks",
    "accel.layout",
}


@pytest.mark.parametrize("module", ["layout", "identity", "_faults"])
def test_it_imports_nothing_above_the_ground_floor(module: str) -> None:
    tree = ast.parse((ROOT / "src" / "accel" / f"{module}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            imported.add(next((n for n in names if n in GROUND_FLOOR), node.module))
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    above = {name for name in imported if name.startswith("accel") and name not in GROUND_FLOOR}
    assert above == set(), f"accel.{module} imports {above}: it must take paths"


def test_the_workspace_paths_are_the_layouts(project: Path, tmp_path: Path) -> None:
    ws = Workspace.discover()
    lay = ws.layout
    assert (lay.root, lay.data, lay.relocated) == (ws.path, ws.path, False)
    assert ws.cache_dir == lay.cache_dir == ws.path / "cache"
    assert ws.lock_path("cache") == layout.lock_file(ws.path, "cache") == lay.lock("cache")
    assert layout.series_lock(ws.path, "main") == ws.path / "locks" / "series-main.lock"
    assert layout.run_lock(ws.path, "r1") == ws.path / "locks" / "run-r1.lock"
    assert ws.config_file == lay.config_file
    moved = layout.Layout(ws.path, tmp_path / "data")
    assert moved.relocated and moved.tmp_dir == tmp_path / "data" / "tmp"
    assert moved.locks_dir == ws.path / "locks"  # locks never move with the data


@pytest.mark.parametrize(
    ("name", "ok"),
    [(".accel-tmp-abcd1234", True), (".accel-tmp-ab", False), ("accel-tmp-abcd1234", False)],
)
def test_an_atomic_write_temp_is_known_by_its_exact_name(name: str, ok: bool) -> None:
    assert layout.is_atomic_temp(name) is ok


def test_every_file_accel_writes_in_a_run_folder_is_named_by_the_layout(tmp_path: Path) -> None:
    """``layout.RUN_FILE_RE`` is the one list (sync pulls these and nothing else): each
    writer's own path must be on it, the stack dumps and heartbeats of accel._worker_hooks
    (loaded by workers without accel) included."""
    from accel import _worker_hooks
    from accel.accelerator._tensorboard import tensorboard_dir
    from accel.hang import worker
    from accel.hang.dump import write_workers
    from accel.launch.runner import LAUNCHER_LOG
    from accel.runs.logindex import index_path
    from accel.runs.metrics import METRICS_FILE
    from accel.telemetry import RESOURCES_FILE

    run = tmp_path / "20261201-120000-abcdef"
    run.mkdir()
    write_workers(run, 1, {0: 1})
    written = [
        layout.RUN_RECORD,
        LAUNCHER_LOG,
        METRICS_FILE,
        RESOURCES_FILE,
        *(p.name for p in run.iterdir()),  # workers.json
        "rank-3.log",
        index_path(run / "rank-3.log").name,
        worker.stacks_path(str(run), 3),
        worker.crash_path(str(run), 3),
        worker.heartbeat_path(str(run), 3),
        str(tensorboard_dir(run, 3) / "events.out.tfevents.1764590000.host.123.0"),
    ]
    for name in written:
        rel = Path(name).relative_to(run).as_posix() if name.startswith("/") else name
        assert layout.RUN_FILE_RE.fullmatch(rel), rel
    assert worker.stacks_path is _worker_hooks.stacks_path  # one spelling, the layout's too
    assert layout.rank_name is _worker_hooks.rank_name
    for planted in ("sitecustomize.py", "stacks/evil.py", "rank-0.log.py", "usercustomize.pth"):
        assert not layout.RUN_FILE_RE.fullmatch(planted)
