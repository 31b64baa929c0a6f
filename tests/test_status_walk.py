"""``accel status`` and ``accel env`` read the workspace in one walk: the sizes of its
parts, the framework caches and the clean scan (debris, largest, oldest) come from one
listing of each folder, and measure what the separate walks measured."""

from __future__ import annotations

import collections
import importlib
import os
import time
from pathlib import Path

import pytest

from accel._fs import tree_size
from accel.env.report import TorchInfo
from accel.frameworks import scan_framework_caches
from accel.layout import make_owned_dir
from accel.workspace import Workspace
from test_status import populate

# Read by others as well, each for its own question: the live-run and lease probes list
# locks/, and the checkpoint reader lists a series folder to decide what is a checkpoint.
PROBED = "locks"
READ_BY_SERIES = 2


def busy(ws: Workspace, outside: Path) -> Workspace:
    """``populate``'s workspace and what a walk must get right: a namespace, a framework
    cache, crash debris, a user's folder, nested run files, links (to a file, to a folder,
    dangling, and a part folder that is one), a FIFO."""
    (ws.cache_dir / "entries" / "ns" / "deeper").mkdir(parents=True)
    kernels = ws.cache_dir / "frameworks" / "inductor" / "fx"
    kernels.mkdir(parents=True)
    (kernels / "k.py").write_text("kernel")
    torn = ws.checkpoints_dir / "main" / "step-000000000007"
    make_owned_dir(torn)  # as a save leaves it: marker, no manifest
    (torn / "model.pt").write_bytes(b"half")
    old = time.time() - 3 * 3600
    for path in (*torn.iterdir(), torn):
        os.utime(path, (old, old))
    notes = ws.checkpoints_dir / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("mine")
    run = next(ws.runs_dir.iterdir())
    (run / "stacks").mkdir()
    (run / "stacks" / "rank-0.txt").write_text("stack")
    outside.mkdir()
    (outside / "big.bin").write_bytes(b"o" * 999)
    (ws.cache_dir / "to-a-file").symlink_to(outside / "big.bin")
    (ws.cache_dir / "to-a-folder").symlink_to(outside)
    (ws.logs_dir / "dangling").symlink_to(outside / "gone")
    os.mkfifo(ws.cache_dir / "entries" / "ns" / "a-fifo")
    return ws


def listings(monkeypatch: pytest.MonkeyPatch, root: Path) -> collections.Counter[str]:
    """How often each folder under ``root`` is listed from now on (``os.scandir``)."""
    counts: collections.Counter[str] = collections.Counter()
    real = os.scandir

    def scandir(path: str | os.PathLike[str] = ".") -> object:
        counts[os.path.relpath(os.fspath(path), root)] += 1
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return counts


def listed_twice(counts: collections.Counter[str]) -> dict[str, int]:
    def most(rel: str) -> int:
        return READ_BY_SERIES if os.path.dirname(rel) == "checkpoints" else 1

    return {rel: n for rel, n in counts.items() if rel != PROBED and n > most(rel)}


def expected_sizes(ws: Workspace) -> dict[str, int]:
    """The parts as ``accel status`` measured them with a walk each."""

    def size(path: Path) -> int:
        return path.stat().st_size if path.is_file() else tree_size(path)

    runs = size(ws.runs_dir)
    return {
        "config": size(ws.path / "config"),
        "cache": size(ws.cache_dir),
        "checkpoints": size(ws.checkpoints_dir),
        "logs": size(ws.logs_dir) - runs,
        "runs": runs,
        "state": size(ws.state_file),
    }


@pytest.mark.parametrize("linked", [False, True], ids=["", "checkpoints-a-link"])
def test_status_lists_each_folder_once_and_measures_the_same(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: bool
) -> None:
    from accel.status import collect

    ws = busy(populate(project), tmp_path / "outside")
    if linked:  # measured where the link leads, as it always was (clean keeps out of it)
        ws.checkpoints_dir.rename(tmp_path / "elsewhere")
        ws.checkpoints_dir.symlink_to(tmp_path / "elsewhere")
    expected = expected_sizes(ws)
    frameworks = scan_framework_caches(ws.cache_dir, ws.reading_settings().cache)
    counts = listings(monkeypatch, ws.path)
    st = collect(ws)
    assert listed_twice(counts) == {}
    assert "cache/entries/big.entry" in counts and "checkpoints/main/step-000000000007" in counts
    assert {p.name: p.size for p in st.parts} == expected
    assert list(st.frameworks) == frameworks and frameworks[0].files == 1
    assert [i.name for i in st.largest][:2] == ["big", "main/step-000000000001"]
    assert st.scan is not None and [i.name for i in st.scan.items if i.kind == "debris"] == [
        "step-000000000007"
    ]


def test_env_lists_each_folder_once_and_judges_debris_from_that_walk(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_collect = importlib.import_module("accel.env.collect")  # not the function of that name
    ws = busy(populate(project), tmp_path / "outside")
    expected = expected_sizes(ws)
    no_torch = TorchInfo(None, None, None, None, None, {}, "not needed here")
    monkeypatch.setattr(env_collect, "torch_info", lambda: no_torch)
    counts = listings(monkeypatch, ws.path)
    report = env_collect.collect(ws, {}, devices=False)
    assert listed_twice(counts) == {}
    assert "cache/entries/big.entry" in counts
    assert dict(report.workspace.sizes) == expected
    debris = [p.message for p in report.problems if p.kind == "debris"]
    assert len(debris) == 1 and "step-000000000007 was left by a crash" in debris[0]
