"""`accel checkpoints export` on a full disk and onto what is not a file: one line each,
nothing left behind, nothing replaced."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from accel_runner import cli

from accel.workspace import Workspace


@pytest.fixture
def saved(ws: Workspace) -> Workspace:
    torch.manual_seed(0)
    ws.checkpoints.save({"model": torch.nn.Linear(64, 64).state_dict()}, 1)
    return ws


class _FullFile(io.FileIO):
    """A file on a full disk: every write fails as the kernel's does."""

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """The export's writes fail with ENOSPC: torch's archive writer sees the failing
    file; safetensors (whose writes are in Rust) fails as it does on a full tmpfs."""
    if fmt == "pt":
        from accel.admin import _writers

        monkeypatch.setattr(_writers, "io", SimpleNamespace(FileIO=_FullFile))
    else:
        import safetensors.torch
        from safetensors import SafetensorError

        def save_file(tensors: Any, path: str, metadata: Any) -> None:
            Path(path).write_bytes(b"half a file")
            raise SafetensorError(
                "Error while serializing: I/O error: No space left on device (os error 28)"
            )

        monkeypatch.setattr(safetensors.torch, "save_file", save_file)


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
@pytest.mark.parametrize("force", [False, True], ids=["new", "over-an-old-file"])
def test_a_full_disk_is_the_storage_line_and_leaves_no_file(
    saved: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, force: bool
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / f"model.{fmt}"
    if force:
        target.write_bytes(b"the old export")
    _full_disk(monkeypatch, fmt)
    result = cli("checkpoints", "export", "-o", str(target), *(["--force"] if force else []))
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1
    assert f"cannot write {target}: No space left on device; the disk is full" in result.stderr
    assert [p.name for p in out.iterdir()] == (["model." + fmt] if force else [])
    if force:
        assert target.read_bytes() == b"the old export"
