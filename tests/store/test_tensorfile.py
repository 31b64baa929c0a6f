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
from accel.store import tensorfile
from accel.store.tensorfile import (
    FileDigest,
    load_tensor_file,
    read_tree,
    save_tensor_file,
    write_tree,
)

from .pagecache import needs_page_cache_control, resident_bytes

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


def _not_storable() -> dict[str, Any]:
    """Tensors whose raw bytes are not the whole tensor, or that have none."""
    return {
        "quantized": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8),
        "bits": torch.zeros(2, dtype=torch.uint8).view(torch.bits8),
        "meta": torch.empty(2, device="meta"),
        "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
    }


@pytest.mark.parametrize("kind", list(_not_storable()))
def test_tensors_with_no_plain_bytes_are_refused_before_a_byte_is_written(
    tmp_path: Path, kind: str
) -> None:
    """A quantized tensor was written as its integers alone, and reading it back crashed
    the reader (SIGSEGV); a meta or nested one failed deep in the writer."""
    from accel import Workspace

    ws = Workspace(tmp_path / ".accelerate")
    value = _not_storable()[kind]
    expected = {
        "quantized": r"state\['w'\] is a quantized tensor \(qint8\); store tensor.dequantize\(\)",
        "bits": r"state\['w'\] has the dtype bits8, which has no plain bytes to store",
        "meta": r"state\['w'\] is on the meta device and holds no data",
        "nested": r"state\['w'\] is a .*not a plain dense tensor",
    }[kind]
    with pytest.raises(UsageError, match=expected):
        ws.checkpoints.save({"w": value}, 1)
    with pytest.raises(UsageError, match=expected.replace("state", "the value")):
        ws.cache.put("k", {"w": value})
    assert ws.checkpoints.list() == [] and ws.cache.get("k") is None
    # and every writer's own check: the memory tier's snapshots write through it alone
    with pytest.raises(
        UsageError, match=expected.replace(r"state\['w'\]", "a tensor of the state")
    ):
        save_tensor_file({"w": value}, tmp_path / "t")


def _with_spec(path: Path, **changes: Any) -> None:
    """Rewrite the first tensor entry of the header of the tensor file ``path``, the
    data left as it was: a hand-made file, whose manifest a forger would fix too."""
    import json
    import struct

    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[8:16])
    start = 16 + length + (-(16 + length) % 64)
    header = json.loads(data[16 : 16 + length])
    header["tensors"][0].update(changes)
    body = json.dumps(header).encode()
    pad = bytes(-(16 + len(body)) % 64)
    path.write_bytes(data[:8] + struct.pack("<Q", len(body)) + body + pad + data[start:])


@pytest.mark.parametrize(
    ("tensor", "changes"),
    [
        (torch.ones(2, 2, dtype=torch.int8), {"dtype": "qint8"}),  # crashed the reader
        (torch.ones(2, 2, dtype=torch.uint8), {"dtype": "bits8"}),
        (torch.ones(2, 2, dtype=torch.uint8), {"dtype": "Tensor"}),
        (torch.ones(2, 2), {"shape": [2.0, 2]}),  # TypeError from frombuffer
        (torch.ones(2, 2), {"shape": ["2", "2"]}),
        (torch.ones(2, 2), {"shape": [2, float("inf")]}),  # OverflowError
        (torch.ones(2, 2), {"shape": [4, True]}),
        (torch.ones(2, 2), {"offset": 0.0}),
        (torch.ones(2, 2), {"nbytes": 16.0}),
        (torch.empty(0, 2), {"shape": [0, 2**70]}),  # TypeError with a C++ stack
        (torch.empty(0, 2), {"shape": [0, 2**40, 2**40]}),  # stride overflow
        (torch.ones(1), {"shape": [1] * 65}),
    ],
    ids=lambda v: str(v).replace(" ", "") if isinstance(v, dict) else None,
)
def test_a_forged_tensor_entry_is_refused_as_damaged(
    tmp_path: Path, tensor: Any, changes: dict[str, Any]
) -> None:
    """Header entries are checked against what a writer makes before a tensor is built,
    so a forged one (its checksum fixed too) is an IntegrityError, which `load_state()`
    answers by resuming from the step before, not a crash or a TypeError."""
    path = tmp_path / "t"
    save_tensor_file({"w": tensor}, path)
    _with_spec(path, **changes)
    with pytest.raises(IntegrityError, match="a tensor entry of its header is not valid"):
        read_tree(path, path.stat().st_size)
    with pytest.raises(IntegrityError, match="a tensor entry of its header is not valid"):
        tensorfile.read_outline(path)


def test_every_storable_dtype_round_trips(tmp_path: Path) -> None:
    names = sorted(n for n in tensorfile.DTYPES if isinstance(getattr(torch, n, None), torch.dtype))
    assert {"float32", "bfloat16", "float8_e4m3fn", "bool"} <= set(names)
    tree = {n: torch.arange(32, dtype=torch.uint8).view(getattr(torch, n)) for n in names}
    digest = save_tensor_file(tree, tmp_path / "t")
    loaded = load_tensor_file(tmp_path / "t", digest)
    assert {n: (t.dtype, t.view(torch.uint8).tolist()) for n, t in loaded.items()} == {
        n: (t.dtype, t.view(torch.uint8).tolist()) for n, t in tree.items()
    }


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


# -- the write pipeline -----------------------------------------------------------------


def _assorted() -> dict[str, Any]:
    gen = torch.Generator().manual_seed(5)
    return {
        "big": torch.randn(70_001, generator=gen),  # many chunks, a ragged tail
        "exact": torch.randn(4096, generator=gen),  # exactly four chunks
        "small": [torch.randn(3, generator=gen).to(d) for d in DTYPES],
        "strided": torch.randn(300, 200, generator=gen).t(),
        "empty": torch.empty(0, 3),
    }


def test_the_device_pipeline_writes_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Device tensors go through the host ring (accel.store._stream); CPU tensors sent
    the same way must give the very same bytes and checksum."""
    tree = _assorted()
    direct = write_tree(tree, tmp_path / "direct", chunk=4 << 10)
    monkeypatch.setattr(tensorfile, "_staged", lambda tensor: True)
    staged = write_tree(tree, tmp_path / "staged", chunk=4 << 10)
    assert staged == direct
    assert (tmp_path / "staged").read_bytes() == (tmp_path / "direct").read_bytes()
    assert _same(tree, load_tensor_file(tmp_path / "staged", FileDigest(*staged)))


def test_many_small_tensors_cost_few_writes(tmp_path: Path) -> None:
    tree = {f"p{i}": torch.full((i % 7 + 1,), float(i)) for i in range(3000)}
    before = _write_calls()
    digest = save_tensor_file(tree, tmp_path / "t")
    writes = _write_calls() - before
    assert _same(tree, load_tensor_file(tmp_path / "t", digest))
    assert writes <= 10  # gathered in one 1 MiB buffer, not two writes per tensor


def _proc_self(field: str, path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    pytest.skip(f"no {field} in {path} on this system")


def _write_calls() -> int:
    return _proc_self("syscw", "/proc/self/io")


def test_a_saved_file_leaves_the_page_cache(tmp_path: Path) -> None:
    """The next save reuses the pages instead of asking for fresh ones."""
    needs_page_cache_control(tmp_path)
    save_tensor_file({"w": torch.randn(4 << 20)}, tmp_path / "t")
    assert resident_bytes(tmp_path / "t") == 0


def test_loading_maps_the_file_without_copying_it(tmp_path: Path) -> None:
    size = 64 << 20
    digest = save_tensor_file({"w": torch.ones(size // 4)}, tmp_path / "t")
    before = _anonymous_bytes()
    tree = load_tensor_file(tmp_path / "t", digest)
    grown = _anonymous_bytes() - before
    assert float(tree["w"][-1]) == 1.0
    # Tensors are views of the file's pages (copy-on-write): no private copy of 64 MiB.
    assert grown < size // 4


def _anonymous_bytes() -> int:
    return _proc_self("RssAnon", "/proc/self/status") * 1024
