"""Links never lead a sync out of where it may write: a pull never writes through a link
in the workspace, a push never writes or cleans through a link in a file:// remote, and
a push never writes into a workspace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sync_helpers import Counted, finished_run, save_checkpoints, tree

from accel import Workspace
from accel.cli.main import main
from accel.sync import open_remote, pull

pytestmark = pytest.mark.timeout(60)
RUN = "20261129-150000-aaaaaa"
NEW_RUN = "20261130-150000-bbbbbb"
STEP3 = "checkpoints/default/step-000000000003"
IN_A_RUN = ("stacks/rank-0.txt", "heartbeats/rank-0", "tensorboard/rank-0/events.out.tfevents.1")
RUN_SUBFOLDERS = ("stacks", "heartbeats", "tensorboard", "tensorboard/rank-0")


@pytest.fixture
def pushed(ws: Workspace, remote_url: str) -> Workspace:
    save_checkpoints(ws, (1, 2))
    folder = finished_run(ws, RUN)
    for rel in IN_A_RUN:  # files a pull puts in subfolders of the run folder
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("from the remote\n")
    assert main(["sync", "push", remote_url]) == 0
    return ws


@pytest.fixture
def fresh(ws: Workspace) -> Workspace:
    """Another workspace, made (a test plants links in it)."""
    return Workspace(ws.path.parent / "clone" / ".accelerate").ensure()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder no sync may write to or clean, holding a file that looks like debris."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / ".accel-tmp-planted").write_text("not yours")
    return folder


def errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("error: ")]


# -- pull: never through a link in the workspace ---------------------------------------------

LOCAL_LINKS = {  # the link planted in the pulling workspace -> what still comes
    "checkpoints/default": "run",
    "checkpoints": "run",
    f"logs/runs/{RUN}": "checkpoints",
    "logs/runs": "checkpoints",
    # in a run folder here (the test makes it), which a pull completes in place
    **{f"logs/runs/{RUN}/{sub}": "checkpoints" for sub in RUN_SUBFOLDERS},
}


@pytest.mark.parametrize("link", sorted(LOCAL_LINKS))
def test_pull_never_writes_through_a_link_in_the_workspace(
    pushed: Workspace,
    fresh: Workspace,
    outside: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    link: str,
) -> None:
    """A series, a run folder, or checkpoints/ or logs/runs/ themselves linked elsewhere:
    the pull wrote the pulled steps (or the run's files) into the link's target, exit 0;
    so did a folder in a run folder already here (stacks/, tensorboard/rank-0/)."""
    planted = fresh.layout.data / link
    if planted.is_dir():
        planted.rmdir()  # an empty folder the new workspace made
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(outside, target_is_directory=True)
    before = tree(outside)
    capsys.readouterr()
    assert main(["--workspace", str(fresh.path), "sync", "pull", remote_url]) == 1
    lines = errors(capsys)
    assert lines == [
        f"error: {link}: refused: {planted} is a symbolic link; pull never writes through "
        "a link, which could lead out of the workspace: remove it (workspace.path moves the data)"
    ], lines
    assert tree(outside) == before and planted.is_symlink()
    if LOCAL_LINKS[link] == "run":  # the rest still came
        assert json.loads((fresh.runs_dir / RUN / "run.json").read_text())["id"] == RUN
    else:
        assert [c.step for c in fresh.checkpoints.list()] == [1, 2]


def test_a_link_made_while_a_pull_plans_is_refused_when_it_writes(
    pushed: Workspace, fresh: Workspace, outside: Path, remote_url: str
) -> None:
    """The plan found no link; one planted before the units move is found by the mover."""
    planted = fresh.checkpoints_dir / "default"

    def plant() -> None:
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.symlink_to(outside, target_is_directory=True)

    before = tree(outside)
    remote = open_remote(remote_url, {}, os.environ)
    result = pull(fresh, remote, reporter=Counted(on_begin=plant))
    failed = {f.unit: f.reason for f in result.failed}
    assert sorted(failed) == [f"checkpoints/default/step-00000000000{n}" for n in (1, 2)]
    assert all(r.startswith(f"{planted} is a symbolic link; ") for r in failed.values())
    assert tree(outside) == before
    assert (fresh.runs_dir / RUN / "run.json").is_file()


def test_a_link_made_in_a_run_folder_while_a_pull_plans_is_refused_when_it_writes(
    pushed: Workspace, fresh: Workspace, outside: Path, remote_url: str
) -> None:
    here = fresh.runs_dir / RUN
    here.mkdir(parents=True)
    (here / "run.json").write_bytes((pushed.runs_dir / RUN / "run.json").read_bytes())
    planted = here / "stacks"
    before = tree(outside)
    remote = open_remote(remote_url, {}, os.environ)
    plant = lambda: planted.symlink_to(outside, target_is_directory=True)  # noqa: E731
    result = pull(fresh, remote, reporter=Counted(on_begin=plant))
    failed = {f.unit: f.reason for f in result.failed}
    assert list(failed) == [f"logs/runs/{RUN}"], failed
    assert failed[f"logs/runs/{RUN}"].startswith(f"{planted} is a symbolic link; ")
    assert tree(outside) == before and not (here / "rank-0.log").exists()
    assert [c.step for c in fresh.checkpoints.list()] == [1, 2]


def test_the_folders_of_a_pulled_file_are_made_one_at_a_time_never_through_a_link(
    tmp_path: Path, outside: Path
) -> None:
    """``mkdir(parents=True)`` follows a link made after the unit was checked."""
    from accel._fs import make_below

    root = tmp_path / "data"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "runs").symlink_to(outside, target_is_directory=True)
    before = tree(outside)
    assert make_below(root, root / "logs" / "runs" / RUN / "stacks") == str(root / "logs/runs")
    assert tree(outside) == before and not (outside / RUN).exists()
    assert make_below(root, root / "checkpoints" / "default") is None
    assert (root / "checkpoints" / "default").is_dir()


# -- push: never through a link in a file:// remote -----------------------------------------

REMOTE_LINKS = {  # the link planted in the remote -> what it catches
    "checkpoints/default": "the new step's files written into the link's target",
    STEP3: "fsspec's find went through the link: the planted debris was deleted",
    f"logs/runs/{NEW_RUN}": "the new run's files written into the link's target",
}


@pytest.mark.parametrize("link", sorted(REMOTE_LINKS))
def test_push_never_writes_or_cleans_through_a_link_in_a_local_remote(
    pushed: Workspace,
    outside: Path,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    link: str,
) -> None:
    planted = remote_dir / link
    if planted.is_dir():
        os.rename(planted, remote_dir / "aside")
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.symlink_to(outside, target_is_directory=True)
    save_checkpoints(pushed, (3,))
    finished_run(pushed, NEW_RUN)
    before = tree(outside)
    capsys.readouterr()
    assert main(["sync", "push", remote_url]) == 1
    lines = errors(capsys)
    assert lines and all(
        line.endswith(
            f": {remote_url}/{link} is a symbolic link; push never writes or cleans through "
            "a link in the remote: remove it"
        )
        for line in lines
    ), lines
    assert tree(outside) == before, REMOTE_LINKS[link]
    index = json.loads((remote_dir / "accel-sync.json").read_text())["files"]
    refused, moved = (STEP3, f"logs/runs/{NEW_RUN}/")
    if link.startswith("logs"):
        refused, moved = moved, STEP3
    assert not [rel for rel in index if rel.startswith(refused)]
    assert [rel for rel in index if rel.startswith(moved)]  # the rest moved and is listed


def test_push_still_sweeps_the_debris_in_the_remotes_own_folders(
    pushed: Workspace, remote_dir: Path, remote_url: str
) -> None:
    for debris in (f"{STEP3}/.accel-tmp-1-state.tensors", f"{STEP3}/sharded/.accel-tmp-2-x"):
        (remote_dir / debris).parent.mkdir(parents=True, exist_ok=True)
        (remote_dir / debris).write_bytes(b"half")
    save_checkpoints(pushed, (3,))
    assert main(["sync", "push", remote_url]) == 0
    assert not [p for p in tree(remote_dir) if ".accel-tmp-" in p]


# -- push: never into a workspace -------------------------------------------------------------


def _other_workspace(tmp_path: Path) -> Path:
    other = Workspace(tmp_path / "other" / ".accelerate").ensure()
    other.config_file.write_text("launch:\n  env:\n    HF_TOKEN: hf_abcdefghijklmnopqrstuvwxyz\n")
    save_checkpoints(other, (7,))
    return other.path


def _relocated_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    other = Workspace(tmp_path / "other" / ".accelerate").ensure()
    other.config_file.write_text(f"workspace:\n  path: {data}\n")
    Workspace(other.path).cache.put("k", b"v")
    assert (data / "accel-data.json").is_file()
    return data


DESTINATIONS = {
    "another workspace": (_other_workspace, "is an accel workspace (it holds layout.json)"),
    "another's data folder": (_relocated_data, "(it holds accel-data.json)"),
    "this workspace": (lambda tmp: Path.cwd() / ".accelerate", "it holds layout.json"),
    "a folder in this workspace": (
        lambda tmp: Path.cwd() / ".accelerate" / "tmp" / "backup",
        "is inside this workspace",
    ),
}


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("where", sorted(DESTINATIONS))
def test_push_into_a_workspace_is_refused_before_anything_is_written(
    pushed: Workspace,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: str,
    dry_run: bool,
) -> None:
    """`accel sync push file:///other/project/.accelerate` replaced its config with the
    redacted copy (the secret lost) and wrote checkpoints into its series without the
    lease."""
    make, message = DESTINATIONS[where]
    folder = make(tmp_path)
    before, mine = tree(folder.parent), tree(pushed.path)
    capsys.readouterr()
    argv = ["sync", "push", folder.as_uri(), *(["--dry-run"] if dry_run else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "push to a folder" in err, err
    assert tree(folder.parent) == before and tree(pushed.path) == mine
