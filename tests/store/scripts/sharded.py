"""Two ranks save a DTensor through the checkpoints' sharded path and load it back.

Then rank 0 flips a byte in rank 1's shard file: every rank must refuse the load. Then
rank 1 cannot find the step rank 0 chose (as a node whose disk does not hold it): every
rank must fail with rank 1's line and stay in step with the others.
Exits 0 when all of that holds on this rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import accel
from accel.errors import IntegrityError, UsageError


def main() -> None:
    acc = accel.Accelerator()
    mesh = init_device_mesh("cpu", (acc.world_size,))
    full = torch.arange(32.0).reshape(8, 4)
    ckpts = acc.workspace.checkpoints
    sharded = {"w": distribute_tensor(full, mesh, [Shard(0)]), "meta": {"lr": 0.1}}
    info = ckpts.save({"step": 5}, 5, sharded=sharded)
    assert info is not None and {"sharded/__0_0.distcp", "sharded/__1_0.distcp"} <= set(info.files)

    target = {"w": distribute_tensor(torch.zeros(8, 4), mesh, [Shard(0)]), "meta": {"lr": 0.0}}
    assert ckpts.load_sharded(target) == 5
    assert torch.equal(target["w"].full_tensor(), full) and target["meta"]["lr"] == 0.1
    assert ckpts.load()["step"] == 5

    if acc.is_main_process:
        shard = info.path / "sharded" / "__1_0.distcp"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x01
        shard.write_bytes(bytes(data))
    dist.barrier()
    try:
        ckpts.load_sharded(target)
    except IntegrityError as exc:
        assert "__1_0.distcp" in str(exc), exc
    else:
        raise AssertionError("a corrupt shard was loaded")

    if acc.process_index == 1:
        ckpts._find = lambda step, series: None  # type: ignore[method-assign]
    try:
        ckpts.load_sharded(target, 5)
    except UsageError as exc:
        assert str(exc).startswith("rank 1: no checkpoint at step 5"), exc
    else:
        raise AssertionError("rank 1 found no step 5, yet this rank loaded it")
    dist.barrier()  # every rank is back in step
    acc.end()


if __name__ == "__main__":
    main()
