"""A push never sends what every later pull would refuse, and never writes an index it
would refuse itself: a checkpoint whose manifest records a checksum accel does not
write, a run whose run.json the runs' own bounded reader cannot read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sync_helpers import finished_run, save_checkpoints, tree

from accel import Workspace
from accel.cli.main import main
from accel.errors import IntegrityError
from accel.runs.record import RECORD_MAX_BYTES
from accel.sync import open_remote
from accel.sync._inventory import redacted_copy
from accel.sync._model import RUN, FileEntry, LocalFile, Skipped

pytestmark = pytest.mark.timeout(60)

STEP = "checkpoints/default/step-000000000002"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def _set_checksum(ws: Workspace, checksum: str) -> Path:
    step_dir = ws.checkpoints_dir / "default" / "step-000000000002"
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["files"]["state.tensors"]["checksum"] = checksum
    (step_dir / "manifest.json").write_text(json.dumps(manifest))
    return step_dir


@pytest.mark.parametrize("checksum", ["md5:abc", "xxh3_64:abc", "nocolon"])
def test_a_manifest_with_a_checksum_accel_does_not_write_is_not_pushed(
    ws: Workspace,
    remote_dir: Path,
    remote_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    checksum: str,
) -> None:
    """The tester's case: the index listed it, the same push then refused that index, and
    every push and pull of the remote failed from then on, the workspace fixed or not."""
    save_checkpoints(ws, (1, 2))
    step_dir = _set_checksum(ws, checksum)
    rc, err = _run(capsys, "sync", "push", remote_url)
    assert rc == 1
    assert f"skipped {STEP}: not sent: its manifest is missing or not valid" in err, err
    assert "refused" not in err, err
    index = json.loads((remote_dir / "accel-sync.json").read_text())
    assert not any(rel.startswith(STEP) for rel in index["files"])
    assert "checkpoints/default/step-000000000001/manifest.json" in index["files"]
    assert not any("step-000000000002" in n for n in tree(remote_dir))
    fresh = tmp_path / "fresh" / ".accelerate"
    rc, err = _run(capsys, "--workspace", str(fresh), "sync", "pull", remote_url)
    assert rc == 0, err
    assert [c.step for c in Workspace(fresh).checkpoints.list()] == [1]
    # the workspace fixed (the damaged step moved aside): the remote still takes pushes
    os.rename(step_dir, tmp_path / "aside")
    rc, err = _run(capsys, "sync", "push", remote_url)
    assert rc == 0, err
    rc, err = _run(capsys, "--workspace", str(fresh), "sync", "pull", remote_url)
    assert rc == 0, err


def test_push_never_writes_an_index_it_would_refuse(remote_dir: Path, remote_url: str) -> None:
    remote = open_remote(remote_url, {}, {})
    good = FileEntry(1, "xxh3_64:" + "0" * 16)
    remote.write_index({"config/accelerate_config.yaml": good})
    before = (remote_dir / "accel-sync.json").read_bytes()
    for checksum in ("md5:abc", "xxh3_64:abc", "nocolon"):
        bad = {"logs/runs/20261129-150000-aaaaaa/rank-0.log": FileEntry(1, checksum)}
        with pytest.raises(IntegrityError, match="accel-sync.json not written"):
            remote.write_index(bad)
        assert (remote_dir / "accel-sync.json").read_bytes() == before
    assert remote.read_index() == {"config/accelerate_config.yaml": good}


def test_a_file_whose_recorded_checksum_the_index_refuses_is_not_uploaded(
    remote_dir: Path, remote_url: str, tmp_path: Path
) -> None:
    local = tmp_path / "state.tensors"
    local.write_bytes(b"abc")
    remote = open_remote(remote_url, {}, {})
    with pytest.raises(IntegrityError, match="unknown checksum algorithm 'md5'.*not pushed"):
        remote.upload(local, f"{STEP}/state.tensors", "md5:abc", lambda n: None)
    assert not (remote_dir / STEP).exists()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:7])


def _not_an_object(path: Path) -> None:
    path.write_text("[1, 2]")


def _huge(path: Path) -> None:
    with open(path, "r+b") as fh:  # sparse: a byte past the reader's limit costs no disk
        fh.truncate(RECORD_MAX_BYTES + 1)


def _another_runs(path: Path) -> None:
    path.write_text(json.dumps({"id": "20261129-150000-zzzzzz", "status": "succeeded"}))


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


DAMAGE = {
    "empty": (_empty, "is not valid JSON"),
    "truncated": (_truncated, "is not valid JSON"),
    "not an object": (_not_an_object, "does not hold a JSON object"),
    "huge": (_huge, f"larger than any such file of accel's ({RECORD_MAX_BYTES} bytes)"),
    "another run's": (_another_runs, "it is the record of '20261129-150000-zzzzzz'"),
    "a fifo": (_fifo, "FIFO"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_run_whose_run_json_cannot_be_read_is_not_pushed_and_says_why(
    ws: Workspace,
    remote_dir: Path,
    remote_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: str,
) -> None:
    """Pushed, it was refused by every pull (`its run.json is not JSON ... refused`)."""
    good = finished_run(ws, "20261129-140000-aaaaaa")
    bad = finished_run(ws, "20261129-150000-bbbbbb")
    change, said = DAMAGE[damage]
    change(bad / "run.json")
    rc, err = _run(capsys, "sync", "push", remote_url)
    assert rc == 1
    line = next(x for x in err.splitlines() if "bbbbbb" in x)
    assert line.startswith(f"error: skipped logs/runs/{bad.name}: run.json unreadable (")
    assert said in line, line
    names = tree(remote_dir)
    assert f"logs/runs/{good.name}/run.json" in names
    assert not any(bad.name in n for n in names)  # none of its files either
    assert not any(bad.name in rel for rel in json.loads(names["accel-sync.json"])["files"])
    fresh = tmp_path / "fresh" / ".accelerate"
    rc, err = _run(capsys, "--workspace", str(fresh), "sync", "pull", remote_url)
    assert rc == 0, err
    assert (fresh / "logs" / "runs" / good.name / "run.json").is_file()


def test_a_run_json_that_grew_past_the_limit_after_the_inventory_is_not_copied(
    ws: Workspace, tmp_path: Path
) -> None:
    """What is uploaded is a copy of the bytes read under the reader's bound, never the
    file itself: one that changed since the inventory is its run's blocking skip."""
    folder = finished_run(ws)
    record, unit = folder / "run.json", f"logs/runs/{folder.name}"
    f = LocalFile(f"{unit}/run.json", record, 10, None, unit, RUN)
    copies = tmp_path / "copies"
    copies.mkdir()
    copy = redacted_copy(f, copies)
    assert isinstance(copy, LocalFile) and copy.path.parent == copies
    assert copy.path.read_bytes() == record.read_bytes()
    _huge(record)
    skipped = redacted_copy(f, copies)
    assert isinstance(skipped, Skipped) and skipped.blocking and skipped.unit == unit
    assert skipped.reason.startswith("run.json unreadable (") and "larger" in skipped.reason
    assert [p.stat().st_size for p in copies.iterdir()] == [copy.size]


def test_a_run_whose_record_grows_while_push_plans_goes_nowhere(
    ws: Workspace, remote_dir: Path, remote_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel.sync import _run, push

    folder = finished_run(ws)
    inventory = _run.inventory

    def then_grow(*args: object) -> object:
        found = inventory(*args)  # type: ignore[arg-type]
        _huge(folder / "run.json")
        return found

    monkeypatch.setattr(_run, "inventory", then_grow)
    result = push(ws, open_remote(remote_url, {}, {}))
    assert not result.ok
    (skip,) = [s for s in result.plan.skipped if s.unit == f"logs/runs/{folder.name}"]
    assert skip.blocking and "run.json unreadable" in skip.reason
    assert not any(folder.name in n for n in tree(remote_dir))  # not its rank log either


def test_metrics_of_scripts_outside_accel_launch_stay_here(
    ws: Workspace, remote_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """logs/runs/local (no run.json) was pushed, and every pull then refused it."""
    import accel

    accel.Accelerator().log({"loss": 1.0}, step=0)  # a plain `python train.py`
    finished_run(ws, "20261129-140000-aaaaaa")
    rc, _ = _run(capsys, "sync", "push", remote_url)
    assert rc == 0
    fresh = tmp_path / "fresh" / ".accelerate"
    rc, err = _run(capsys, "--workspace", str(fresh), "sync", "pull", remote_url)
    assert rc == 0, err
    assert not (fresh / "logs" / "runs" / "local").exists()
