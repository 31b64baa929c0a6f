"""Sharded model and optimizer state for checkpoints, and the full state for export.

A checkpoint of an FSDP run holds each sharded model's and its optimizers' state as
``torch.distributed.checkpoint`` files under ``sharded/`` (names ``model.<i>`` and
``optimizer.<j>``, the indices of the prepared objects), written and read through the
store's commit protocol (:meth:`accel.store.checkpoints.Checkpoints.save` with
``sharded=``). Unsharded objects stay in ``state.tensors`` as before; the replicated
state lists the sharded names, so loading knows which objects come from where.

The state dicts come from torch's public ``torch.distributed.checkpoint.state_dict``
(``get_model_state_dict`` / ``get_optimizer_state_dict`` and their ``set_*`` twins):
keys are the parameters' names, so a checkpoint loads into any number of ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accel.errors import UsageError

Parts = tuple[list[Any], list[Any], dict[str, Any] | None]


def is_sharded(model: Any) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _owner(optimizer: Any, models: Sequence[Any]) -> Any:
    """The sharded model whose parameters ``optimizer`` steps, if any."""
    mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for model in models:
        if is_sharded(model) and any(id(p) in mine for p in model.parameters()):
            return model
    return None


def sharded_names(models: Sequence[Any], optimizers: Sequence[Any]) -> list[str]:
    names = [f"model.{i}" for i, m in enumerate(models) if is_sharded(m)]
    names += [f"optimizer.{j}" for j, o in enumerate(optimizers) if _owner(o, models) is not None]
    return names


def _sharded_state(name: str, models: Sequence[Any], optimizers: Sequence[Any]) -> Any:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    kind, index = name.split(".")
    if kind == "model":
        return get_model_state_dict(models[int(index)])
    optimizer = optimizers[int(index)]
    # With no state yet (a fresh run loading a checkpoint), torch creates it with a
    # zero-learning-rate step so that there is a structure to load into.
    return get_optimizer_state_dict(_owner(optimizer, models), optimizer)


def save_parts(models: Sequence[Any], optimizers: Sequence[Any]) -> Parts:
    """(model states, optimizer states, sharded state or None): ``{}`` stands in the
    first two for what the sharded state holds. A collective when something is sharded."""
    names = sharded_names(models, optimizers)
    sharded = {name: _sharded_state(name, models, optimizers) for name in names}
    model_states = [{} if f"model.{i}" in sharded else m.state_dict() for i, m in enumerate(models)]
    optim_states = [
        {} if f"optimizer.{j}" in sharded else o.state_dict() for j, o in enumerate(optimizers)
    ]
    return model_states, optim_states, sharded or None


def load_parts(
    checkpoints: Any, step: int, saved: Sequence[str], models: Sequence[Any], optimizers: Any
) -> frozenset[str]:
    """Restore the sharded objects of checkpoint ``step`` in place; their names."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    names = sharded_names(models, optimizers)
    if sorted(names) != sorted(saved):
        raise UsageError(
            f"the checkpoint of step {step} holds {_described(saved)} but this run has "
            f"{_described(names)}; load it with the FSDP setting of the run that saved it "
            "(launch.fsdp / --fsdp)"
        )
    if not names:
        return frozenset()
    target = {name: _sharded_state(name, models, optimizers) for name in names}
    checkpoints.load_sharded(target, step)
    for name, state in target.items():
        kind, index = name.split(".")
        if kind == "model":
            set_model_state_dict(models[int(index)], state)
        else:
            optimizer = optimizers[int(index)]
            set_optimizer_state_dict(_owner(optimizer, models), optimizer, state)
    return frozenset(names)


def _described(names: Sequence[str]) -> str:
    return "FSDP-sharded " + ", ".join(sorted(names)) if names else "no FSDP-sharded state"


def plain(tensor: Any) -> Any:
    """A DTensor as the whole tensor it stands for (e.g. a gradient norm); else as is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def full_state_dict(model: Any, rank: int) -> dict[str, Any]:
    """The whole state dict on rank 0, on the CPU; ``{}`` on the other ranks.

    For a sharded model a collective: every rank gathers, rank 0 keeps the result.
    """
    if not is_sharded(model):
        return dict(model.state_dict()) if rank == 0 else {}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_model_state_dict(model, options=options)
    return dict(full) if rank == 0 else {}
