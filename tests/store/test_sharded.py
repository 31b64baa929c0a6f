"""Sharded state through torch.distributed.checkpoint: verified, and never unpickled unsafely."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.errors import DoesNotFit, IntegrityError, UsageError
from accel.store.hashing import hash_file
from run_helpers import Accel

# On the oldest supported torch too (.ci/run): this leans on torch's internals.
pytestmark = pytest.mark.edge

SCRIPT = Path(__file__).parent / "scripts" / "sharded.py"


def test_single_process_round_trip(ws: Workspace) -> None:
    info = ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.arange(6.0), "n": {"k": 2}})
    assert info is not None and "sharded/.metadata" in info.files
    target: dict[str, Any] = {"w": torch.zeros(6), "n": {"k": 0}}
    assert ws.checkpoints.load_sharded(target) == 1
    assert torch.equal(target["w"], torch.arange(6.0)) and target["n"]["k"] == 2
    with pytest.raises(UsageError, match="synchronously"):
        ws.checkpoints.save({}, 2, sharded={"w": torch.ones(1)}, async_save=True)


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def _forge(step_dir: Path, name: str, payload: bytes) -> None:
    (step_dir / name).write_bytes(payload)
    manifest = json.loads((step_dir / "manifest.json").read_text())
    checksum, size = hash_file(step_dir / name)
    manifest["files"][name] = {"size": size, "checksum": checksum}
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


def test_pickles_in_dcp_files_are_never_executed(ws: Workspace, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    info = ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.ones(2)})
    assert info is not None
    _forge(info.path, "sharded/.metadata", pickle.dumps(_Exploit(str(marker))))
    with pytest.raises(IntegrityError, match="refused"):
        ws.checkpoints.load_sharded({"w": torch.zeros(2)})
    assert not marker.exists()


def test_a_corrupt_shard_is_refused(ws: Workspace) -> None:
    info = ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.ones(64)})
    assert info is not None
    shard = info.path / "sharded" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="checksum"):
        ws.checkpoints.load_sharded({"w": torch.zeros(64)})


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_ranks_save_and_load_a_dtensor(accel: Accel) -> None:
    # Through `accel launch`, as users run it: torch's gloo sometimes hangs a rank in
    # interpreter teardown after the script returned (accel.launch.teardown), which
    # hung this test run bare (CI, torch 2.6); a hang in the script says where it hung
    # (CI, torch 2.6: rank 1 as main() returned, tearing down the checkpoint group, which
    # accel now keeps to the interpreter's teardown).
    done = accel("launch", "-n", "2", str(SCRIPT), timeout=120, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]


# -- DCP metadata: read once, checked, and that object is what DCP gets -------------------


def _rewrite_metadata(step_dir: Path, change: Any) -> None:
    """``change(metadata)`` on the checkpoint's own DCP metadata (trusted here), re-listed
    in the manifest as a forger with write access would."""
    path = step_dir / "sharded" / ".metadata"
    metadata = pickle.loads(path.read_bytes())
    change(metadata)
    _forge(step_dir, "sharded/.metadata", pickle.dumps(metadata))


def _export(ws: Workspace, output: Path) -> None:
    from accel.admin.export import ExportRequest, export

    export(ws, ExportRequest(output, step=1, model="model"))


def _load(ws: Workspace, output: Path) -> None:
    target = {"model": {"w": torch.zeros(4)}}
    ws.checkpoints.load_sharded(target)
    assert torch.equal(target["model"]["w"], torch.arange(4.0))


@pytest.mark.parametrize("swap_after", [1, 2], ids=["after-verify", "after-read"])
@pytest.mark.parametrize("route", [_load, _export], ids=["load_sharded", "export"])
def test_a_metadata_swapped_after_it_was_checked_is_never_unpickled(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: Any, swap_after: int
) -> None:
    """The race of issue 22, made deterministic: right after accel's n-th open of
    ``.metadata`` (by any route), a pickle payload is renamed into its place. accel opens
    it twice (verify hashes it; the one read checks and unpickles it) and DCP never:
    the payload is refused or never looked at, and never runs."""
    import io as io_mod

    marker = tmp_path / "pwned"
    info = ws.checkpoints.save({"step": 1}, 1, sharded={"model": {"w": torch.arange(4.0)}})
    assert info is not None
    metadata = info.path / "sharded" / ".metadata"
    payload = tmp_path / "payload"
    payload.write_bytes(pickle.dumps(_Exploit(str(marker))))
    opens: list[str] = []
    real_os_open, real_io_open = os.open, io_mod.open

    def swap(opened: Any, path: Any) -> Any:
        if isinstance(path, (str, Path)) and os.path.abspath(path) == str(metadata):
            opens.append(str(path))
            if len(opens) == swap_after:
                os.replace(payload, metadata)  # the open one keeps the checked bytes
        return opened

    monkeypatch.setattr(os, "open", lambda p, *a, **k: swap(real_os_open(p, *a, **k), p))
    monkeypatch.setattr(io_mod, "open", lambda p, *a, **k: swap(real_io_open(p, *a, **k), p))
    if swap_after == 1:  # the payload is what the one read sees: refused, never unpickled
        with pytest.raises(
            IntegrityError, match="fails its checksum|bytes the manifest rec|its record says"
        ):
            route(ws, tmp_path / "model.safetensors")
    else:  # the one read already holds the checked bytes: DCP is given those
        route(ws, tmp_path / "model.safetensors")
    assert not marker.exists()
    assert len(opens) == 2


def _relative_path(name: str) -> Any:
    def change(metadata: Any) -> None:
        for info in metadata.storage_data.values():
            info.relative_path = name

    return change


def _storage(**fields: int) -> Any:
    def change(metadata: Any) -> None:
        info = next(iter(metadata.storage_data.values()))
        for key, value in fields.items():
            setattr(info, key, value)

    return change


def _huge_shape(metadata: Any) -> None:
    entry = metadata.state_dict_metadata["model.w"]
    entry.size = torch.Size([2**62])
    entry.chunks[0].sizes = torch.Size([2**62])


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_relative_path("../../step-000000000002/sharded/__0_0.distcp"), "not a file of sharded/"),
        (_relative_path("__7_0.distcp"), "not a file of sharded/"),  # on disk, not listed
        (_relative_path(".metadata"), "not a file of sharded/"),
        (_storage(length=-1), "not a non-negative integer"),
        (_storage(offset=-8), "not a non-negative integer"),
        (_storage(offset=1 << 40), "lies outside __0_0.distcp"),
        (_storage(length=1 << 40), "lies outside __0_0.distcp"),
        (_huge_shape, "holds more than the sharded files do"),
    ],
    ids=["parent", "unlisted", "metadata", "neg-length", "neg-offset", "far", "long", "2^62"],
)
@pytest.mark.parametrize("route", [_load, _export], ids=["load_sharded", "export"])
def test_metadata_that_names_other_files_or_bytes_is_refused_as_damaged(
    ws: Workspace, tmp_path: Path, change: Any, says: str, route: Any
) -> None:
    info = ws.checkpoints.save({"step": 1}, 1, sharded={"model": {"w": torch.arange(4.0)}})
    other = ws.checkpoints.save({"step": 2}, 2, sharded={"model": {"w": torch.full((4,), 7.0)}})
    assert info is not None and other is not None
    (info.path / "sharded" / "__7_0.distcp").write_bytes(
        (other.path / "sharded" / "__0_0.distcp").read_bytes()
    )
    _rewrite_metadata(info.path, change)
    with pytest.raises(IntegrityError, match=f"damaged: .*{says}") as caught:
        if route is _load:
            ws.checkpoints.load_sharded({"model": {"w": torch.zeros(4)}}, 1)
        else:
            _export(ws, tmp_path / "model.safetensors")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "model.safetensors").exists()


@pytest.mark.parametrize("module", ["pathlib", "pathlib._local"])
def test_metadata_holding_a_path_loads_whichever_python_pickled_it(
    ws: Workspace, module: str
) -> None:
    # DCP's metadata holds the checkpoint's path; Python 3.13 pickles it as
    # pathlib._local.PosixPath, which the allowlist refused: every sharded checkpoint
    # saved on 3.13 was "not plain DCP metadata" (and older Pythons have no such module)
    import re

    info = ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.arange(4.0)})
    assert info is not None
    path = info.path / "sharded" / ".metadata"
    as_text = pickle.dumps(pickle.loads(path.read_bytes()), protocol=2)  # c<module>\n<name>
    named = re.subn(
        rb"cpathlib(?:\._local)?\nPosixPath\n", f"c{module}\nPosixPath\n".encode(), as_text
    )
    assert named[1] >= 1  # DCP keeps a path in it: the case is real
    _forge(info.path, "sharded/.metadata", named[0])
    target = {"w": torch.zeros(4)}
    ws.checkpoints.load_sharded(target, 1)
    assert torch.equal(target["w"], torch.arange(4.0))


@pytest.mark.timeout(30)
def test_a_fifo_in_place_of_the_metadata_is_refused_without_blocking(ws: Workspace) -> None:
    from accel.store import sharded as sharded_mod
    from accel.store.manifest import read_manifest

    info = ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.ones(2)})
    assert info is not None
    metadata = info.path / "sharded" / ".metadata"
    metadata.unlink()
    os.mkfifo(metadata)
    with pytest.raises(IntegrityError, match="not a regular file"):
        sharded_mod.read_metadata(metadata.parent, read_manifest(info.path).files)


def test_a_failure_inside_dcp_is_one_accel_line_not_a_checkpoint_exception(
    ws: Workspace,
) -> None:
    """DCP's CheckpointException is a BaseException: it must not pass `except Exception`.
    A shape the verified files do not have is another model's state, not damage."""
    ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.ones(4)})
    with pytest.raises(DoesNotFit, match=r"^Size mismatch .*torch.Size\(\[4\]\).* for w$"):
        ws.checkpoints.load_sharded({"w": torch.zeros(3)})  # not the shape it was saved with
    with pytest.raises(DoesNotFit, match=r"^unexpected key\(s\) in checkpoint: model.0.b$"):
        ws.checkpoints.save({"step": 2}, 2, sharded={"model.0": {"a": torch.ones(2), "b": 1}})
        ws.checkpoints.load_sharded({"model.0": {"a": torch.zeros(2)}})


def _fifo(path: Path, other: Path) -> None:
    os.mkfifo(path)


def _link(path: Path, other: Path) -> None:
    path.symlink_to(other)  # another checkpoint's shard, of the very same size


def _longer(path: Path, other: Path) -> None:
    path.write_bytes(other.read_bytes() + b"more")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("swap", [_fifo, _link, _longer], ids=["fifo", "link", "longer"])
def test_a_shard_swapped_after_verification_is_refused_not_read_or_waited_on(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, swap: Any
) -> None:
    from accel.store import sharded as sharded_mod

    info = ws.checkpoints.save({"step": 1}, 1, sharded={"w": torch.arange(4.0)})
    other = ws.checkpoints.save({"step": 2}, 2, sharded={"w": torch.full((4,), 7.0)})
    assert info is not None and other is not None
    shard, theirs = info.path / "sharded" / "__0_0.distcp", other.path / "sharded" / "__0_0.distcp"
    assert shard.stat().st_size == theirs.stat().st_size
    checked = sharded_mod.read_metadata

    def read_then_swap(folder: Path, files: Any) -> Any:
        metadata = checked(folder, files)  # after the verification: what DCP opens next
        shard.unlink()
        swap(shard, theirs)
        return metadata

    monkeypatch.setattr(sharded_mod, "read_metadata", read_then_swap)
    target = {"w": torch.zeros(4)}
    with pytest.raises(
        IntegrityError,
        match="not a regular file|bytes the manifest records|its record says|symbolic link|cannot be read",
    ):
        ws.checkpoints.load_sharded(target, 1)
    assert not torch.equal(target["w"], torch.full((4,), 7.0))


@pytest.mark.timeout(20)
def test_a_fifo_among_the_shards_is_this_ranks_problem_not_an_exception(tmp_path: Path) -> None:
    """verify_share reports a special file as its problem, so every rank hears of it
    (an exception on one rank would leave the others waiting in the next collective)."""
    from accel.store.collectives import DistContext
    from accel.store.hashing import FileDigest
    from accel.store.sharded import verify_share

    (tmp_path / "sharded").mkdir()
    os.mkfifo(tmp_path / "sharded" / "__0_0.distcp")
    files = {"sharded/__0_0.distcp": FileDigest(size=4, checksum="xxh3_64:0")}
    problem = verify_share(tmp_path, files, DistContext(rank=0, world_size=1))
    assert problem is not None and "FIFO" in problem
