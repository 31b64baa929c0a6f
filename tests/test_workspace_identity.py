"""A workspace is a folder accel made: anything else is never written to or cleaned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel.clean import clean
from accel.errors import WorkspaceError
from accel.identity import ABSENT, FOREIGN, OURS, root_state
from accel.status import collect
from accel.workspace import Workspace

DAY = 86400.0
REFUSAL = (
    "is not an accel workspace (it holds cache, checkpoints, logs and 3 more): "
    "point --workspace at a project's .accelerate"
)


def accel(exe: list[str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*exe, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def a_project(project: Path) -> dict[str, bytes]:
    """A training project with files that look like a workspace's: they are the user's."""
    files = {
        "train.py": b"print('hi')\n",
        "checkpoints/best.pt": b"weights",
        "checkpoints/step-000000000001/manifest.json": b'{"format": 1}',
        "logs/train.log": b"epoch 1\n",
        "logs/training.log.1": b"theirs\n",
        "tmp/scratch.bin": b"scratch",
        "cache/entries/x.entry/meta.json": b"{}",
        "state.bin": b"theirs",
    }
    for rel, data in files.items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (time.time() - 30 * DAY,) * 2)
    return files


def unchanged(project: Path, files: dict[str, bytes]) -> bool:
    found = {str(p.relative_to(project)): p.read_bytes() for p in project.rglob("*") if p.is_file()}
    return found == files


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "args",
    [
        ["clean", "--older-than", "1d", "--yes"],
        ["clean", "--keep-last", "0", "--max-size", "0", "--yes"],
        ["clean", "--older-than", "1d", "--dry-run"],
        ["clean", "--auto"],
        ["config", "--default"],
        ["config", "set", "launch.num_processes", "2"],
        ["status"],
    ],
)
def test_the_project_folder_as_workspace_is_refused_and_left_untouched(
    project: Path, accel_exe: list[str], args: list[str]
) -> None:
    files = a_project(project)
    result = accel(accel_exe, "--workspace", ".", *args, cwd=project)
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and REFUSAL in result.stderr
    assert unchanged(project, files)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_env_var_to_a_foreign_folder_is_refused_too(
    project: Path, accel_exe: list[str], tmp_path: Path
) -> None:
    files = a_project(project)
    env = {**os.environ, "ACCEL_WORKSPACE": str(project)}
    result = subprocess.run(
        [*accel_exe, "clean", "--older-than", "1d", "--yes"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2 and REFUSAL in result.stderr
    assert unchanged(project, files)
    report = json.loads(accel(accel_exe, "--workspace", str(project), "status", "--json").stdout)
    assert REFUSAL in report["workspace_error"] and report["sizes"] == {}


def test_a_project_folder_with_a_stray_file_names_it_and_the_way_out(tmp_path: Path) -> None:
    # `run accel config --default there` sent users in a circle: that command refuses
    # the same folder. The line names what is in the way; moving it out is the fix.
    root = tmp_path / ".accelerate"
    (root / "config").mkdir(parents=True)
    (root / "config" / "accelerate_config.yaml").write_text("version: 1\n")
    (root / "notes.txt").write_text("mine\n")
    with pytest.raises(WorkspaceError) as refused:
        Workspace(root).ensure()
    assert str(refused.value) == (
        f"{root} is not an accel workspace: it holds notes.txt, which accel did not write; "
        "move it elsewhere, or point --workspace at another folder"
    )
    (root / "notes.txt").rename(tmp_path / "notes.txt")
    assert Workspace(root).ensure().path == root


def test_first_use_creates_a_workspace_where_nothing_or_only_a_config_is(
    project: Path, tmp_path: Path
) -> None:
    assert root_state(project / ".accelerate") == ABSENT
    ws = Workspace.discover().ensure()  # does not exist yet: created
    ws.cache.put("k", 1)
    assert root_state(project / ".accelerate") == OURS
    assert collect(ws).left_alone == ()  # all of it accel's own, .gitignore included
    empty = tmp_path / "empty"
    empty.mkdir()
    Workspace(empty).ensure()  # an empty folder: made accel's
    assert (empty / "layout.json").exists()
    cloned = tmp_path / "clone" / ".accelerate"  # a config committed to git, nothing else
    (cloned / "config").mkdir(parents=True)
    (cloned / "config" / "accelerate_config.yaml").write_text("launch:\n  num_processes: 2\n")
    (cloned / ".gitignore").write_text("*\n")
    assert root_state(cloned) == ABSENT
    ws = Workspace(cloned).ensure()
    assert ws.config["launch.num_processes"] == 2 and ws.identify()


def test_a_workspace_another_process_is_making_is_not_foreign(tmp_path: Path) -> None:
    """What a second process sees while the first writes .gitignore and layout.json: the
    temporaries of accel's own atomic writes (CI saw two launchers refuse each other)."""
    root = tmp_path / ".accelerate"
    (root / "locks").mkdir(parents=True)
    (root / "locks" / "layout.lock").touch()
    (root / "locks" / ".accel-tmp-0a1b2c3d").touch()
    (root / "config").mkdir()
    (root / "config" / ".accel-tmp-4e5f6a7b").touch()
    (root / ".accel-tmp-8c9d0e1f").touch()  # layout.json being written
    assert root_state(root) == ABSENT
    (root / ".accel-tmp-8c9d0e1f.bak").touch()  # not a name mkstemp gives: someone's file
    assert root_state(root) == FOREIGN


def test_a_workspace_made_between_the_two_looks_is_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """root_state looks for layout.json, then lists the folder: another process may finish
    the workspace in between (layout.json, then its folders)."""
    root = tmp_path / ".accelerate"
    root.mkdir()
    listdir = os.listdir

    def the_other_process_finishes(path: str | os.PathLike[str]) -> list[str]:
        if Path(path) == root and not (root / "layout.json").exists():
            (root / "layout.json").write_text('{"layout_version": 1, "id": "0123456789abcdef"}')
            (root / "cache").mkdir()
        return listdir(path)

    monkeypatch.setattr(os, "listdir", the_other_process_finishes)
    assert root_state(root) == OURS


def test_a_data_folder_claimed_between_the_two_looks_is_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    ws = Workspace(tmp_path / "p" / ".accelerate").ensure()
    ws.config_file.write_text(f"workspace:\n  path: {data}\n")
    ws = Workspace(ws.path)
    ident = json.loads(ws.layout_file.read_text())["id"]
    data.mkdir()
    listdir = os.listdir

    def the_other_process_claims(path: str | os.PathLike[str]) -> list[str]:
        if Path(path) == data and not (data / "accel-data.json").exists():
            (data / "accel-data.json").write_text(
                json.dumps({"layout_version": 1, "workspace_id": ident})
            )
            (data / "cache").mkdir()
        return listdir(path)

    monkeypatch.setattr(os, "listdir", the_other_process_claims)
    assert ws.identify()


RACE = """
import sys, time
from pathlib import Path
from accel.workspace import Workspace
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
Workspace(Path(sys.argv[1])).ensure()
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("relocated", [False, True])
def test_processes_that_make_one_workspace_at_once_all_succeed(
    tmp_path: Path, relocated: bool
) -> None:
    for round_ in range(4):
        root = tmp_path / str(round_) / ".accelerate"
        go = tmp_path / f"go-{round_}"
        if relocated:
            (root / "config").mkdir(parents=True)
            data = tmp_path / f"data-{round_}"
            (root / "config" / "accelerate_config.yaml").write_text(f"workspace:\n  path: {data}\n")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACE, str(root), str(go)], stderr=subprocess.PIPE, text=True
            )
            for _ in range(4)
        ]
        time.sleep(0.5)  # they are importing; then all start at once
        go.touch()
        errors = [proc.communicate(timeout=60)[1] for proc in procs]
        assert [proc.returncode for proc in procs] == [0] * 4, errors
        assert Workspace(root).identify()


def test_a_non_empty_folder_without_the_marker_is_refused(project: Path) -> None:
    (project / "notes.txt").write_text("mine")
    assert root_state(project) == FOREIGN
    with pytest.raises(WorkspaceError, match="not an accel workspace"):
        Workspace(project).ensure()
    with pytest.raises(WorkspaceError, match="not an accel workspace"):
        Workspace(project).cache.put("k", 1)
    with pytest.raises(WorkspaceError, match="not an accel workspace"):
        Workspace(project).checkpoints.save({"x": 1}, 1)
    assert sorted(os.listdir(project)) == ["notes.txt"]


def _relocated(project: Path, data: Path) -> Workspace:
    ws = Workspace(project / ".accelerate").ensure()
    ws.config_file.write_text(f"workspace:\n  path: {data}\n")
    return Workspace(ws.path)


@pytest.mark.slow
def test_workspace_path_at_a_shared_folder_deletes_nothing_of_another_jobs(
    project: Path, tmp_path: Path, accel_exe: list[str]
) -> None:
    shared = tmp_path / "shared"
    files = a_project(shared)
    ws = _relocated(project, shared)
    with pytest.raises(WorkspaceError, match=r"workspace.path\) holds files accel did not"):
        ws.cache.put("k", 1)
    result = accel(accel_exe, "clean", "--older-than", "1d", "--yes", cwd=project)
    assert result.returncode == 2 and "holds files accel did not write" in result.stderr
    assert unchanged(shared, files)


def test_the_data_folder_of_another_workspace_is_refused(project: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = _relocated(project, data)
    first.cache.put("mine", b"first")
    marker = json.loads((data / "accel-data.json").read_text())
    assert marker["workspace_id"] == json.loads(first.layout_file.read_text())["id"]
    other = tmp_path / "other"
    other.mkdir()
    second = _relocated(other, data)
    with pytest.raises(WorkspaceError, match="holds the data of another accel workspace"):
        second.cache.put("theirs", b"second")
    with pytest.raises(WorkspaceError, match="another accel workspace"):
        clean(second, older_than="0s")
    assert first.cache.get("mine") == b"first"
    assert clean(Workspace(first.path), older_than="1h").plan.items == ()


def test_a_relocated_data_folder_gets_its_own_marker_and_works(
    project: Path, tmp_path: Path
) -> None:
    ws = _relocated(project, tmp_path / "fresh" / "data")
    ws.cache.put("k", b"v")
    ws.checkpoints.save({"w": 1}, 1)
    assert (tmp_path / "fresh" / "data" / "accel-data.json").exists()
    assert ws.cache.get("k") == b"v" and ws.checkpoints.latest() is not None
    (tmp_path / "fresh" / "data" / "mine.txt").write_text("user")
    outcome = clean(ws, older_than="0s", keep_last=0, now=time.time() + DAY)
    assert (tmp_path / "fresh" / "data" / "mine.txt").read_text() == "user"
    kept = {k.item.path.name: k.reason for k in outcome.plan.kept}
    assert kept["mine.txt"] == "unknown, left alone"


def test_a_damaged_data_marker_names_the_fix_that_keeps_it_this_workspaces(
    project: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = _relocated(project, data)
    first.cache.put("mine", b"first")
    (data / "accel-data.json").write_text("{broken")
    with pytest.raises(WorkspaceError) as refused:
        first.cache.put("more", b"x")
    ident = json.loads(first.layout_file.read_text())["id"]
    fix = json.dumps({"layout_version": 1, "workspace_id": ident})
    assert str(refused.value).endswith(
        f"restore it, or write {fix} into it if this folder is the data of {first.path}"
    )
    (data / "accel-data.json").write_text(fix)  # as the line says
    first.cache.put("more", b"x")
    assert first.cache.get("mine") == b"first"
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(WorkspaceError, match="holds the data of another accel workspace"):
        _relocated(other, data).cache.put("theirs", b"second")
