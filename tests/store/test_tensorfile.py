"""The tensor file: every supported value round-trips; nothing malformed gets through."""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch

from accel.errors import IntegrityError, UsageError
from accel.store._serial import FileDigest, load_tensor_file, save_tensor_file
from accel.store._tensorfile import read_tree

DTYPES = (torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.bool, torch.complex64)


def _tree() -> dict[Any, Any]:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "f32": base,
        "strided": base.t(),  # non-contiguous
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 5),
        "dtypes": [torch.ones(3, dtype=d) for d in DTYPES],
        "param": torch.nn.Parameter(torch.ones(2)),
        7: "int key",
        "od": OrderedDict([("b", 1), ("a", 2)]),
        "tuple": (1, (2.5, None), [True, "s"]),
        "bytes": b"\x00\xff",
        "floats": [float("nan"), float("inf"), -0.0, 1e308],
        "big": 2**80,
        "complex": 1 + 2j,
        "torch": [torch.Size([2, 3]), torch.float16, torch.device("cpu")],
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        same_kind = type(b) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape
        return same_kind and torch.equal(a.detach(), b)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_round_trip(tmp_path: Path) -> None:
    tree = _tree()
    digest = save_tensor_file(tree, tmp_path / "t")
    assert digest.size == (tmp_path / "t").stat().st_size
    assert _same(tree, load_tensor_file(tmp_path / "t", digest))


def test_unsupported_values_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot store"):
        save_tensor_file({"x": object()}, tmp_path / "t")


def test_random_corruption_is_always_refused(tmp_path: Path) -> None:
    digest = save_tensor_file(_tree(), tmp_path / "t")
    original = (tmp_path / "t").read_bytes()
    rng = random.Random(7)
    for trial in range(200):
        data = bytearray(original)
        # Half the trials hit the header, where a bad value must not crash the reader.
        index = rng.randrange(400) if trial % 2 else rng.randrange(len(data))
        data[index] ^= 1 << rng.randrange(8)
        (tmp_path / "c").write_bytes(bytes(data))
        with pytest.raises(IntegrityError):
            load_tensor_file(tmp_path / "c", FileDigest(len(data), digest.checksum))


def test_truncation_is_refused(tmp_path: Path) -> None:
    digest = save_tensor_file(_tree(), tmp_path / "t")
    data = (tmp_path / "t").read_bytes()
    for cut in (0, 10, 100, len(data) - 1):
        (tmp_path / "c").write_bytes(data[:cut])
        with pytest.raises(IntegrityError):
            read_tree(tmp_path / "c", cut)
    with pytest.raises(IntegrityError, match="manifest says"):
        load_tensor_file(tmp_path / "c", digest)
