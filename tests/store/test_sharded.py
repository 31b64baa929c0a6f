"""Sharded state through torch.distributed.checkpoint: verified, and never unpickled unsafely."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accel import Workspace
from accel.errors import IntegrityError, UsageError
from accel.store._hashing import hash_file

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
@pytest.mark.timeout(120)
def test_two_ranks_save_and_load_a_dtensor(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
        env.update(
            ACCEL_WORKSPACE=str(tmp_path / ".accelerate"), OMP_NUM_THREADS="1",
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
        )  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT)], env=env))
    try:
        assert [p.wait(timeout=100) for p in procs] == [0, 0]
    finally:
        for p in procs:
            p.kill()  # a no-op for those that exited
            p.wait()
