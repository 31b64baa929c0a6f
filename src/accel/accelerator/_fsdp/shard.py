"""``fully_shard`` a model per the wrapping policy, and keep its optimizers pointing at it.

FSDP2 replaces every parameter by a new ``nn.Parameter`` holding a DTensor shard. An
optimizer made before ``prepare()`` (the usual order, as with DDP) would keep stepping
the old, unsharded tensors while training used the new ones: the sharder remembers
which new parameter replaced which old one and moves every prepared optimizer over.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from accel.accelerator._fsdp import compat
from accel.config.fsdp import FsdpSettings
from accel.errors import UsageError


class Sharder:
    """Shards the models of one :class:`~accel.Accelerator` on one device mesh."""

    def __init__(self, settings: FsdpSettings, device: Any, world_size: int) -> None:
        self.settings = settings
        self.device = device
        self.world_size = world_size
        self._mesh: Any = None
        self._moved: dict[int, Any] = {}  # id(old parameter) -> its sharded replacement
        self._old: list[Any] = []  # the old parameters, alive so that no id is reused

    def shard(self, model: Any, optimizers: Iterable[Any]) -> Any:
        """``model`` sharded in place (already sharded: as it is); optimizers moved over."""
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if isinstance(model, FSDPModule):
            return model
        _sync_from_rank0(model)
        if not any(True for _ in model.parameters()):
            return model  # nothing to shard (torch refuses the state of such a module)
        if self.device.type == "cpu":
            compat.prepare_cpu_streams()
        before = dict(model.named_parameters())
        reshard = compat.reshard_after_forward(
            self.settings.reshard_after_forward, self.device.type
        )
        for module in [*wrap_targets(model, self.settings), model]:
            fully_shard(module, mesh=self.mesh, reshard_after_forward=reshard)
        after = dict(model.named_parameters())
        self._moved.update({id(old): after[name] for name, old in before.items()})
        self._old.extend(before.values())
        for optimizer in optimizers:
            self.adopt(optimizer)
        return model

    @property
    def mesh(self) -> Any:
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            self._mesh = init_device_mesh(self.device.type, (self.world_size,))
        return self._mesh

    def adopt(self, optimizer: Any) -> None:
        """Point ``optimizer`` at the sharded parameters that replaced its own."""
        for group in optimizer.param_groups:
            params = group["params"]
            old = [p for p in params if id(p) in self._moved]
            if any(p in optimizer.state for p in old):
                raise UsageError(
                    "an optimizer that has already stepped cannot follow its model into "
                    "FSDP: prepare() the model (and the optimizer) before training"
                )
            group["params"] = [self._moved.get(id(p), p) for p in params]


def _sync_from_rank0(model: Any) -> None:
    """Rank 0's weights on every rank before sharding, as DDP does at construction."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            dist.broadcast(tensor, src=0)


def wrap_targets(model: Any, settings: FsdpSettings) -> list[Any]:
    """The modules to shard before the root, children before their parents."""
    if settings.wrap == "transformer":
        picked = _layers(model, settings.layer_classes)
    elif settings.wrap == "size":
        picked = _big_modules(model, settings.min_params)
    else:
        picked = set()
    seen: set[int] = set()
    targets = []
    for module in _post_order(model):
        if id(module) in picked and id(module) not in seen and module is not model:
            seen.add(id(module))  # a module shared by two parents is sharded once
            targets.append(module)
    return targets


def _layers(model: Any, names: tuple[str, ...]) -> set[int]:
    import torch

    if names:
        present = {type(m).__name__ for m in model.modules()}
        missing = [n for n in names if n not in present]
        if missing:
            raise UsageError(
                f"launch.fsdp_layer_classes names {missing[0]!r}, but no module of "
                f"{type(model).__name__} has that class; its classes: "
                f"{', '.join(sorted(present))}"
            )
    else:
        names = tuple(getattr(model, "_no_split_modules", None) or ())
    if names:  # the classes asked for, or those a Hugging Face model declares
        return {id(m) for m in model.modules() if type(m).__name__ in names}
    lists = (m for m in model.modules() if isinstance(m, torch.nn.ModuleList))
    return {id(block) for blocks in lists for block in blocks}


def _big_modules(model: Any, min_params: int) -> set[int]:
    """Bottom-up: a module whose parameters not held by a picked descendant reach
    ``min_params`` is picked (as torch's size-based policy counts); 0 picks none."""
    if min_params <= 0:
        return set()
    picked: set[int] = set()
    left: dict[int, int] = {}
    for module in _post_order(model):
        own = sum(p.numel() for p in module.parameters(recurse=False))
        count = own + sum(left[id(child)] for child in module.children())
        if count >= min_params and module is not model:
            picked.add(id(module))
            count = 0
        left[id(module)] = count
    return picked


def _post_order(module: Any) -> Iterator[Any]:
    for child in module.children():
        yield from _post_order(child)
    yield module
