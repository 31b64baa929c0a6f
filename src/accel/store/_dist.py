"""The collective steps of a distributed save, and their single-process identity.

Checkpoint collectives run on a process group of their own (gloo, created on the
first save, which every rank makes): an async save then talks in its background
thread without interleaving with the training loop's collectives.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from accel.errors import UsageError


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    group: Any = None

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world_size == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def all_gather(self, obj: Any) -> list[Any]:
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out


SINGLE = DistContext(rank=0, world_size=1)


def current_context(previous: DistContext | None) -> DistContext:
    """The context of this process; a collective the first time a group is made."""
    dist = sys.modules.get("torch.distributed")
    initialized = dist is not None and dist.is_available() and dist.is_initialized()
    if not initialized:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world > 1:
            raise UsageError(
                f"WORLD_SIZE is {world} but torch.distributed is not initialized; create "
                "accel.Accelerator() (or call init_process_group) before saving"
            )
        return SINGLE
    assert dist is not None
    world = dist.get_world_size()
    if world == 1:
        return SINGLE
    if previous is not None and previous.world_size == world:
        return previous
    group = dist.new_group(backend="gloo")
    return DistContext(rank=dist.get_rank(), world_size=world, group=group)
