"""The host ring that device tensors pass through on their way to a file, run on CPU
tensors: the same code, with synchronous copies."""

from __future__ import annotations

import pytest
import torch

from accel.store._stream import SLOTS, Ring, lease

CHUNK = 4096


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("nbytes", [1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 3])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.bool, torch.complex64])
def test_pieces_are_the_tensor_bytes_in_order(nbytes: int, dtype: torch.dtype) -> None:
    count = max(1, nbytes // dtype.itemsize)
    tensor = torch.randint(0, 2, (count,)).to(dtype) if dtype is torch.bool else None
    if tensor is None:
        tensor = torch.randint(0, 255, (count * dtype.itemsize,), dtype=torch.uint8).view(dtype)
    ring = Ring(CHUNK, pinned=False)
    pieces = [bytes(p) for p in ring.pieces(tensor)]
    assert b"".join(pieces) == _bytes(tensor)
    assert all(len(p) == CHUNK for p in pieces[:-1]) and 0 < len(pieces[-1]) <= CHUNK


def test_an_empty_tensor_has_no_pieces() -> None:
    assert list(Ring(CHUNK, pinned=False).pieces(torch.empty(0))) == []


def test_the_next_chunk_is_copied_before_this_one_is_handed_out() -> None:
    tensor = torch.arange(4 * CHUNK, dtype=torch.uint8)
    ring = Ring(CHUNK, pinned=False)
    pieces = ring.pieces(tensor)
    first = next(pieces)
    assert bytes(first) == _bytes(tensor[:CHUNK])
    # The copy of chunk 1 is already queued in the other buffer: it overlaps the write
    # of chunk 0 (on a GPU, the copy engine works while the CPU writes).
    assert _bytes(ring.slots[1 % SLOTS]) == _bytes(tensor[CHUNK : 2 * CHUNK])
    assert [bytes(p) for p in pieces] == [
        _bytes(tensor[i * CHUNK : (i + 1) * CHUNK]) for i in range(1, 4)
    ]


def test_rings_are_reused_across_saves_never_shared() -> None:
    with lease(CHUNK, pinned=False) as first, lease(CHUNK, pinned=False) as concurrent:
        assert concurrent is not first
    with lease(CHUNK, pinned=False) as later:
        assert later is first or later is concurrent
    with lease(2 * CHUNK, pinned=False) as other_size:
        assert other_size.chunk == 2 * CHUNK
