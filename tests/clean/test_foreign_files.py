"""Files accel did not make inside accel's folders are never deleted with them: not by
`checkpoints rm`, retention, `cache rm` or `clean --only runs`; `--force` removes them."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from clean_factory import DAY, age_tree, checkpoint, run, workspace

from accel.admin.remove import plan_cache_removal, plan_checkpoint_removal, remove
from accel.clean import clean
from accel.workspace import Workspace
from run_helpers import accel

NOTE = "notes.txt"


def _saved(ws: Workspace, *steps: int) -> list[Path]:
    """Checkpoints written as a finished run left them (no lease held here)."""
    return [checkpoint(ws, "default", step, created=time.time() - DAY) for step in steps]


def _old_run(ws: Workspace) -> Path:
    old = "2020-01-01T00:00:00+00:00"
    folder = run(ws, "20200101-000000-abcdef", started=old, ended=old)
    (folder / "analysis.ipynb").write_text("{}")
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    age_tree(folder, time.time() - 30 * DAY)
    return folder


def test_checkpoints_rm_keeps_a_note_in_the_step_folder(project: Path) -> None:
    ws = workspace(project)
    old, _ = _saved(ws, 1, 2)
    (old / NOTE).write_text("lr 3e-4 diverged here")
    plan = plan_checkpoint_removal(ws, 1, None)
    assert plan.items[0].foreign == (NOTE,)
    assert plan.to_json()["items"][0]["foreign"] == [NOTE]
    result = remove(ws, plan)
    assert not result.ok and "1 file(s) accel did not make (notes.txt)" in result.kept[0].reason
    assert sorted(p.name for p in old.iterdir()) == [NOTE]
    assert (old / NOTE).read_text() == "lr 3e-4 diverged here"
    assert [i.step for i in ws.checkpoints.list()] == [2]  # step 1 is no checkpoint any more
    assert ws.checkpoints.debris() == []  # and no debris a later clean would take
    assert old in {k.item.path for k in clean(ws, keep_last=0, dry_run=True).plan.kept}


def test_checkpoints_rm_force_removes_the_note_too(project: Path) -> None:
    ws = workspace(project)
    old, _ = _saved(ws, 1, 2)
    (old / NOTE).write_text("x")
    assert remove(ws, plan_checkpoint_removal(ws, 1, None, force=True)).ok
    assert not old.exists()


def test_retention_keeps_a_note_and_warns(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "1")
    ws = workspace(project)
    ws.checkpoints.save({"w": torch.ones(4)}, 1)
    old = ws.checkpoints.list()[0].path
    (old / "sub").mkdir()
    (old / "sub" / NOTE).write_text("mine")
    with pytest.warns(RuntimeWarning, match=r"accel did not make \(sub/notes.txt\)"):
        ws.checkpoints.save({"w": torch.ones(4)}, 2)
    ws.checkpoints.wait()
    assert [i.step for i in ws.checkpoints.list()] == [2]
    assert [str(p.relative_to(old)) for p in sorted(old.rglob("*"))] == ["sub", "sub/notes.txt"]
    log = (ws.logs_dir / "training.log").read_text()
    assert "sub/notes.txt" in log and "retention" in log


def test_cache_rm_keeps_a_readme_in_the_entry(project: Path) -> None:
    ws = workspace(project)
    info = ws.cache.put("datasets/index", b"abc")
    (info.path / "README.md").write_text("how I built it")
    plan = plan_cache_removal(ws, "datasets/index", None)
    assert plan.items[0].foreign == ("README.md",)
    result = remove(ws, plan)
    assert not result.ok and "README.md" in result.kept[0].reason
    assert ws.cache.info("datasets/index") is None
    assert sorted(p.name for p in info.path.iterdir()) == ["README.md"]
    # The folder is no entry any more: the next rm refuses it, clean leaves it alone.
    outcome = clean(ws, only=["cache"], older_than=0)
    assert info.path in {k.item.path for k in outcome.plan.kept}
    assert (info.path / "README.md").read_text() == "how I built it"


def test_cache_rm_force_removes_the_readme_too(project: Path) -> None:
    ws = workspace(project)
    info = ws.cache.put("k", b"abc")
    (info.path / "README.md").write_text("x")
    assert remove(ws, plan_cache_removal(ws, "k", None, force=True)).ok
    assert not info.path.exists()


def test_clean_only_runs_keeps_a_notebook_in_the_run_folder(project: Path) -> None:
    ws = workspace(project)
    folder = _old_run(ws)
    outcome = clean(ws, only=["runs"], older_than="1d")
    assert [p.item.foreign for p in outcome.plan.items] == [("analysis.ipynb",)]
    assert outcome.result is not None and outcome.result.skipped
    assert sorted(p.name for p in folder.iterdir()) == ["analysis.ipynb"]
    assert clean(ws, only=["runs"], older_than=0, force=True).plan.items == ()


def test_clean_force_removes_the_notebook_too(project: Path) -> None:
    ws = workspace(project)
    folder = _old_run(ws)
    clean(ws, only=["runs"], older_than="1d", force=True)
    assert not folder.exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_plan_names_the_foreign_files_it_keeps(project: Path) -> None:
    ws = workspace(project)
    old, _ = _saved(ws, 1, 2)
    (old / NOTE).write_text("x")
    info = ws.cache.put("k", b"abc")
    (info.path / "README.md").write_text("x")
    stays = "holds 1 file(s) accel did not make (notes.txt): they stay, with the folder"
    for args in (["clean", "--keep-last", "1"], ["checkpoints", "rm", "1"]):
        result = accel(project, *args, "--dry-run")
        assert result.returncode == 0, result.stderr
        assert stays in result.stdout + result.stderr
        forced = accel(project, *args, "--dry-run", "--force")
        assert "(notes.txt): --force removes them too" in forced.stdout + forced.stderr
    result = accel(project, "cache", "rm", "k", "--dry-run")
    assert "(README.md): they stay" in result.stdout + result.stderr
    result = accel(project, "cache", "rm", "k", "--yes")
    assert result.returncode == 1 and "README.md" in result.stdout + result.stderr
    assert (info.path / "README.md").exists()


def test_ws_checkpoints_delete_keeps_a_note_and_warns(project: Path) -> None:
    ws = workspace(project)
    old, _ = _saved(ws, 1, 2)
    (old / NOTE).write_text("x")
    with pytest.warns(RuntimeWarning, match=r"\(notes.txt\)"):
        assert ws.checkpoints.delete(1)
    assert [p.name for p in old.iterdir()] == [NOTE]
    assert [i.step for i in ws.checkpoints.list()] == [2]


def test_a_folder_at_the_markers_name_is_not_accels_and_stays(project: Path) -> None:
    """accel makes a file at ``.accel-owned``: a folder there is someone else's, kept
    with its folder like a note (before: IsADirectoryError out of ``delete``)."""
    ws = workspace(project)
    info = ws.cache.put("k", b"abc")
    old, _ = _saved(ws, 1, 2)
    for folder in (info.path, old):
        (folder / ".accel-owned").unlink()
        (folder / ".accel-owned").mkdir()
        (folder / ".accel-owned" / NOTE).write_text("mine")
    assert ws.cache.delete("k")
    with pytest.warns(RuntimeWarning, match=r"\.accel-owned"):
        assert ws.checkpoints.delete(1)
    for folder in (info.path, old):
        assert [p.name for p in folder.iterdir()] == [".accel-owned"]
    assert ws.cache.info("k") is None and [i.step for i in ws.checkpoints.list()] == [2]
    outcome = clean(ws, older_than=0, keep_last=0)
    assert {info.path, old} <= {k.item.path for k in outcome.plan.kept}
    assert (old / ".accel-owned" / NOTE).read_text() == "mine"


def _entry_tree(entry: Path, rng: random.Random) -> None:
    """A cache entry as accel writes it, plus what a user or a crash may add: files at the
    top, in a version folder and in folders below it, other folders, links, temps."""
    version = entry / "v0123456789abcdef"
    version.mkdir(parents=True)
    for path in (entry / "meta.json", entry / ".accel-owned", version / "value.bin"):
        path.write_bytes(b"x")
    extras = [
        lambda: (entry / "README.md").write_text("mine"),
        lambda: (entry / ".accel-tmp-meta.json.x1y2").write_bytes(b""),
        lambda: (entry / "value.bin").write_bytes(b"flat"),
        lambda: (version / "notes.txt").write_text("theirs, but in a version folder"),
        lambda: (version / "sub").mkdir() or (version / "sub" / "deep.txt").write_text("d"),
        lambda: (version / "empty").mkdir(),
        lambda: (entry / "other").mkdir() or (entry / "other" / "f").write_text("o"),
        lambda: (entry / "empty-folder").mkdir(),
        lambda: (entry / "vfedcba9876543210").write_text("a file with a version's name"),
        lambda: (entry / "link").symlink_to("/etc"),
        lambda: (entry / "v00000000000000aa").symlink_to(version),
    ]
    for extra in rng.sample(extras, rng.randint(0, 4)):
        extra()


@pytest.mark.parametrize("seed", range(40))
def test_the_entry_fast_path_names_what_the_full_walk_names(tmp_path: Path, seed: int) -> None:
    # foreign_in_entry answers "accel's files only" from one or two listings (a clean
    # plan asks it of every planned entry); any doubt goes to the full walk.
    from accel.layout import foreign_files
    from accel.store.entry import entry_file, foreign_in_entry

    rng = random.Random(seed)
    entry = tmp_path / "k.entry"
    _entry_tree(entry, rng)
    for payload in ("value.bin", "v0123456789abcdef/value.bin", None):
        assert foreign_in_entry(entry, payload) == foreign_files(entry, entry_file(payload))


def test_a_plan_names_foreign_files_without_reading_meta_json_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scan read every entry's meta.json; the plan re-read each planned one to learn
    # its payload's name (a third of `clean --dry-run` over 20,000 entries).
    ws = workspace(project)
    infos = [ws.cache.put(f"k{i}", b"v") for i in range(20)]
    (infos[3].path / "README.md").write_text("mine")
    from accel.clean import _foreign

    opened: list[str] = []
    real = os.open

    def counting(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fspath(path))
        return real(path, *args, **kwargs)

    annotate = _foreign.annotate

    def watched(plan: Any) -> Any:
        monkeypatch.setattr(os, "open", counting)
        try:
            return annotate(plan)
        finally:
            monkeypatch.setattr(os, "open", real)

    monkeypatch.setattr(_foreign, "annotate", watched)
    plan = clean(ws, only=["cache"], older_than=0, dry_run=True).plan
    assert len(plan.items) == 20
    assert [i.item.foreign for i in plan.items if i.item.foreign] == [("README.md",)]
    assert not [p for p in opened if p.endswith("meta.json")], opened


def test_an_entry_that_is_a_link_is_never_listed_through_it(tmp_path: Path) -> None:
    # The plan's fast path lists each planned entry: never the folder a link points to.
    from accel.store.entry import holds_only_own

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "meta.json").write_text("{}")
    (outside / "value.bin").write_bytes(b"v")
    link = tmp_path / "k.entry"
    link.symlink_to(outside)
    assert holds_only_own(str(outside), "value.bin")  # the same folder, not through a link
    assert not holds_only_own(str(link), "value.bin")
    version = outside / "v0123456789abcdef"
    version.symlink_to(outside)  # a version folder that is a link: not accel's
    assert not holds_only_own(str(outside), "value.bin")


@pytest.mark.parametrize("kind", ["fifo", "folder", "empty"])
def test_a_meta_json_that_is_no_record_is_named_and_its_entry_left_alone(
    project: Path, kind: str
) -> None:
    # The scan reads each meta.json with one short read and checks the file's type only
    # when the read is not a record's: a FIFO or a folder in its place says what it is.
    ws = workspace(project)
    entry = ws.cache.put("k", b"v").path
    meta = entry / "meta.json"
    meta.unlink()
    {"fifo": os.mkfifo, "folder": os.mkdir, "empty": Path.touch}[kind](meta)
    plan = clean(ws, only=["cache"], older_than=0, dry_run=True).plan
    assert not plan.items
    said = " ".join(plan.scan.warnings)
    expected = {"fifo": "is a FIFO", "folder": "is a folder", "empty": "Expecting value"}[kind]
    assert f"skipped {entry}: unreadable meta.json" in said and expected in said, said
