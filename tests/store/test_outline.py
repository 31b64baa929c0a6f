"""The outline of a tensor file: the tree of its header, read without torch."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from accel.errors import IntegrityError
from accel.store.tensorfile import TensorRef, read_outline, write_tree


def test_the_outline_mirrors_the_tree(tmp_path: Path) -> None:
    tree = {
        "step": 7,
        "models": [OrderedDict(w=torch.ones(2, 3), b=torch.zeros(3, dtype=torch.bfloat16))],
        "extra": {"loss": float("nan"), "tags": ("a", b"\x01"), "shape": torch.Size([4])},
        "dtype": torch.float16,
        "where": torch.device("cpu"),
        "z": 1 + 2j,
    }
    write_tree(tree, tmp_path / "s.tensors")
    outline = read_outline(tmp_path / "s.tensors")
    assert outline["models"][0] == {
        "w": TensorRef("float32", (2, 3)),
        "b": TensorRef("bfloat16", (3,)),
    }
    assert outline["step"] == 7 and outline["extra"]["tags"] == ("a", b"\x01")
    assert outline["extra"]["shape"] == (4,) and outline["dtype"] == "float16"
    assert outline["where"] == "cpu" and outline["z"] == 1 + 2j
    assert list(outline) == list(tree)


@pytest.mark.slow
def test_reading_an_outline_does_not_import_torch(tmp_path: Path) -> None:
    write_tree({"w": torch.ones(3)}, tmp_path / "s.tensors")
    code = (
        "import sys; from pathlib import Path\n"
        "from accel.store.tensorfile import read_outline\n"
        f"print(read_outline(Path({str(tmp_path / 's.tensors')!r})))\n"
        "assert 'torch' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "TensorRef(dtype='float32', shape=(3,))" in result.stdout


@pytest.mark.parametrize(
    "damage", [b"", b"NOTATENS" + bytes(8), b"ACCELTNS" + (10**9).to_bytes(8, "little")]
)
def test_a_damaged_header_is_refused(tmp_path: Path, damage: bytes) -> None:
    path = tmp_path / "s.tensors"
    path.write_bytes(damage)
    with pytest.raises(IntegrityError, match="refused"):
        read_outline(path)


def test_a_link_is_refused(tmp_path: Path) -> None:
    write_tree({"w": torch.ones(3)}, tmp_path / "s.tensors")
    (tmp_path / "link.tensors").symlink_to(tmp_path / "s.tensors")
    with pytest.raises(IntegrityError, match="symbolic link"):
        read_outline(tmp_path / "link.tensors")
