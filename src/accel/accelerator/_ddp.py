"""DistributedDataParallel whose first broadcast waits for the first forward.

DDP broadcasts rank 0's parameters and buffers when it is built, so that every rank
starts from the same weights. A script that resumes (``load_state()``) then overwrites
every parameter with the checkpoint's, the same bytes on every rank: that broadcast was
for nothing, and it was most of ``prepare()`` in a restart (0.10 of its 0.12 s for the
21M parameters of ``benchmarks/bench_recovery.py``, gloo on the CPU).

So where torch's DDP takes ``init_sync`` (from 2.7), accel builds it without, checks at
once what DDP's own sync checked first (that every rank's parameters have the same
names, shapes and dtypes: a mismatch is one error, not a hang in a later collective),
and broadcasts from the model's first forward, before it runs: the parameters and the
buffers, or only the buffers when ``load_state()`` loaded the model meanwhile. Every
rank takes the same branch: ``load_state()`` is a collective, and a failed one raises on
every rank. A model under ``torch.compile`` (the hook would be traced) or a torch without
``init_sync`` keeps DDP's sync at construction.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from accel.errors import UsageError

__all__ = ["defers", "loaded", "unwrap", "wrap"]

_DEFERRED = "_accel_deferred_sync"  # the attribute on the DDP module


def wrap(model: Any, device_ids: Any, options: dict[str, Any], *, compiled: bool) -> Any:
    """``DistributedDataParallel(model, device_ids=..., **options)``, its sync deferred
    where it can be."""
    from torch.nn.parallel import DistributedDataParallel

    if unwrap(model, keep_torch_compile=False) is not _uncompiled(model):
        # wrapped twice, its gradients would be reduced twice and its checkpoints' keys
        # would all start with 'module.' (what a script without DDP cannot load)
        raise UsageError(
            f"prepare(): the model is already a {type(_uncompiled(model)).__name__}: give "
            "prepare() the model itself (model.module), accel wraps it in DDP; DDP's options "
            "go in kwargs_handlers=[DistributedDataParallelKwargs(...)]"
        )

    if compiled or not defers():
        return DistributedDataParallel(model, device_ids=device_ids, **options)
    ddp = DistributedDataParallel(model, device_ids=device_ids, init_sync=False, **options)
    _check_same_model(ddp)
    setattr(ddp, _DEFERRED, _Deferred(ddp))
    return ddp


def unwrap(model: Any, keep_torch_compile: bool = True) -> Any:
    """The module inside every DDP and DataParallel layer (Accelerate's
    ``extract_model_from_parallel``), and inside ``torch.compile`` unless
    ``keep_torch_compile`` (then the compiled module around it, where there is one)."""
    from torch.nn import DataParallel
    from torch.nn.parallel import DistributedDataParallel

    compiled = None
    while True:
        if isinstance(model, (DistributedDataParallel, DataParallel)):
            model = model.module
        elif getattr(model, "_orig_mod", None) is not None:  # torch.compile's module
            compiled, model = model, model._orig_mod
        else:
            break
    keep = keep_torch_compile and compiled is not None and compiled._orig_mod is model
    return compiled if keep else model


def _uncompiled(model: Any) -> Any:
    inner = getattr(model, "_orig_mod", None)
    return model if inner is None else _uncompiled(inner)


def defers() -> bool:
    """Whether this torch's DDP can be built without its sync (``init_sync``)."""
    from torch.nn.parallel import DistributedDataParallel

    return "init_sync" in inspect.signature(DistributedDataParallel.__init__).parameters


def loaded(model: Any) -> None:
    """``load_state()`` gave ``model`` the checkpoint's parameters on every rank."""
    deferred = getattr(model, _DEFERRED, None)
    if deferred is not None:
        deferred.params_loaded = True


class _Deferred:
    """The broadcast DDP skipped at construction, run by the first forward."""

    def __init__(self, ddp: Any) -> None:
        self.ddp = ddp
        self.params_loaded = False
        self._hook = ddp.register_forward_pre_hook(self._sync)

    def _sync(self, module: Any, args: Any) -> None:
        import torch
        import torch.distributed as dist

        self._hook.remove()
        ddp = self.ddp
        ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
        tensors = [] if self.params_loaded else list(ddp.module.named_parameters())
        tensors += list(ddp.module.named_buffers())
        group = ddp.process_group
        source = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            for name, tensor in tensors:
                if name not in ignored:
                    dist.broadcast(tensor.detach(), src=source, group=group)


def _check_same_model(ddp: Any) -> None:
    """Every rank's parameters: the same names, shapes and dtypes (one all-gather)."""
    import torch
    import torch.distributed as dist

    described = ";".join(
        f"{name}:{tuple(p.shape)}:{p.dtype}" for name, p in ddp.module.named_parameters()
    )
    digest = int.from_bytes(hashlib.blake2b(described.encode(), digest_size=7).digest(), "big")
    on = next(ddp.module.parameters()).device  # DDP refuses a model without any
    mine = torch.tensor([digest], dtype=torch.int64, device=on)
    group = ddp.process_group
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    differ = [rank for rank, theirs in enumerate(every) if int(theirs.item()) != digest]
    if differ:
        raise UsageError(
            f"the model given to prepare() differs across ranks (rank {differ[0]}'s "
            "parameters have other names, shapes or dtypes than this rank's): build the "
            "same model on every rank"
        )
