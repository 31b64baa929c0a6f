"""What a sync reads from a remote is bounded: the index by a fixed size, a file by the
size its index records; a FIFO or a device in a local remote is refused at once, never
waited on or read without end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sync_helpers import Counted, http_server, save_checkpoints, tree

from accel import Workspace
from accel.cli.main import main
from accel.sync import open_remote, pull
from accel.sync._remote import INDEX_MAX_BYTES

# A hang is what these tests catch: a FIFO read waits for a writer, /dev/zero never ends.
pytestmark = pytest.mark.timeout(30)
STEP = "checkpoints/default/step-000000000002"


@pytest.fixture
def pushed(ws: Workspace, remote_url: str) -> Workspace:
    save_checkpoints(ws, (1, 2))
    assert main(["sync", "push", remote_url]) == 0
    return ws


@pytest.fixture
def fresh(ws: Workspace) -> Workspace:
    return Workspace(ws.path.parent / "clone" / ".accelerate")


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def a_tensor_file(pushed: Workspace, remote_dir: Path) -> Path:
    info = pushed.checkpoints.get(2)
    assert info is not None
    return remote_dir / STEP / next(n for n in info.files if n.endswith(".tensors"))


# -- the index ---------------------------------------------------------------------------------


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _padded(path: Path) -> None:
    """A valid index, one byte over the bound (a remote's endless answer, cut short)."""
    index = json.dumps(json.loads(path.read_text())).encode()
    path.write_bytes(index + b" " * (INDEX_MAX_BYTES + 1 - len(index)))


INDEXES = {
    "a FIFO": (_fifo, "accel-sync.json is a FIFO, not a regular file; refused"),
    "a link to /dev/zero": (_dev_zero, "is a character device, not a regular file; refused"),
    "larger than any index": (
        _padded,
        f"is larger than any index accel writes ({INDEX_MAX_BYTES} bytes); refused",
    ),
}
ARGVS = {"pull": ["pull"], "push": ["push"], "push --dry-run": ["push", "--dry-run"]}


@pytest.mark.parametrize("argv", sorted(ARGVS))
@pytest.mark.parametrize("index", sorted(INDEXES))
def test_an_index_that_is_no_bounded_regular_file_is_refused_at_once(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    index: str,
    argv: str,
) -> None:
    """A FIFO hung pull, push and push --dry-run (push holding the sync lock); a link to
    /dev/zero read without end (MemoryError)."""
    plant, message = INDEXES[index]
    plant(remote_dir / "accel-sync.json")
    save_checkpoints(pushed, (3,))
    before = tree(pushed.path)
    target = fresh.path if argv == "pull" else pushed.path
    capsys.readouterr()
    assert main(["--workspace", str(target), "sync", *ARGVS[argv], remote_url]) == 1
    err = one_line(capsys)
    assert err.startswith(f"error: {remote_url}/accel-sync.json ") and message in err, err
    assert not fresh.path.exists() and tree(pushed.path) == before
    assert not (remote_dir / "checkpoints/default/step-000000000003").exists()


# -- a file ------------------------------------------------------------------------------------


def _larger(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b"\0" * (32 << 20))


FILES = {
    "a FIFO": (_fifo, "is a FIFO, not a regular file; refused"),
    "a link to /dev/zero": (_dev_zero, "is a character device, not a regular file; refused"),
    "larger than its index says": (_larger, "is larger than the remote index records ("),
}


@pytest.mark.parametrize("kind", sorted(FILES))
def test_a_remote_file_is_read_no_further_than_its_recorded_size(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    kind: str,
) -> None:
    """A 300 MB state.tensors listed as 10 KB was downloaded whole before it was refused;
    a link to /dev/zero wrote 1.3 GB in 8 s; a FIFO hung the pull and left its stage."""
    plant, message = FILES[kind]
    target = a_tensor_file(pushed, remote_dir)
    plant(target)
    read = Counted()
    result = pull(fresh, open_remote(remote_url, {}, os.environ), reporter=read)
    assert [f.unit for f in result.failed] == [STEP]
    assert result.failed[0].reason.startswith(f"{remote_url}/{STEP}/{target.name} ")
    assert message in result.failed[0].reason
    assert read.seen <= result.plan.total_bytes + 1  # its recorded size, and a byte more
    assert [c.step for c in fresh.checkpoints.list()] == [1]  # the rest came
    assert sorted(p.name for p in fresh.checkpoints_dir.joinpath("default").iterdir()) == [
        "step-000000000001"
    ]  # no stage left


@pytest.mark.timeout(60)
def test_a_file_served_larger_than_recorded_is_read_no_further(
    pushed: Workspace, fresh: Workspace, remote_dir: Path
) -> None:
    """The bound holds for every backend: over http:// too (a server without ranges)."""
    pytest.importorskip("aiohttp", reason="fsspec's http:// needs aiohttp (s3fs brings it)")
    target = a_tensor_file(pushed, remote_dir)
    _larger(target)
    read = Counted()
    with http_server(remote_dir) as url:
        result = pull(fresh, open_remote(url, {}, os.environ), reporter=read)
    assert [f.unit for f in result.failed] == [STEP]
    assert "is larger than the remote index records (" in result.failed[0].reason
    assert read.seen <= result.plan.total_bytes + 1
    assert [c.step for c in fresh.checkpoints.list()] == [1]
