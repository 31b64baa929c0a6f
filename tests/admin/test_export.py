"""Export's tensor handling: shared memory and views become independent tensors."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from accel.admin.export import _independent


def test_tied_and_viewed_tensors_are_written_apart(tmp_path: Path) -> None:
    emb = torch.randn(10, 4)
    base = torch.arange(12.0)
    tensors = {
        "embed.weight": emb,
        "head.weight": emb,  # tied: the same tensor under two names
        "head.t": emb.t(),  # a non-contiguous view of it
        "part": base[4:8],  # a view into a larger buffer
        "empty": torch.empty(0),
        "empty2": torch.empty(0, 3),
    }
    out = _independent(tensors)
    pointers = [t.untyped_storage().data_ptr() for t in out.values() if t.numel()]
    assert len(set(pointers)) == len(pointers)
    assert all(t.is_contiguous() for t in out.values())
    assert out["part"].untyped_storage().nbytes() == 4 * 4
    save_file(out, str(tmp_path / "m.safetensors"))  # refuses shared memory otherwise
    torch.save(out, tmp_path / "m.pt")
    for loaded in (
        load_file(str(tmp_path / "m.safetensors")),
        torch.load(tmp_path / "m.pt", weights_only=True),
    ):
        assert loaded.keys() == tensors.keys()
        assert all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    assert (tmp_path / "m.pt").stat().st_size < 4096  # not the whole of `base` per view
