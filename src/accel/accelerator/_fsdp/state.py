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

from accel.errors import DoesNotFit, UsageError

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


def sharded_names(
    models: Sequence[Any], optimizers: Sequence[Any], *, fresh: bool = True
) -> list[str]:
    """The sharded models and the optimizers that step them; without ``fresh``, only
    optimizers that have state (a fresh one is saved as it is: asking torch for its
    sharded state would make it take a step)."""
    names = [f"model.{i}" for i, m in enumerate(models) if is_sharded(m)]
    names += [
        f"optimizer.{j}"
        for j, o in enumerate(optimizers)
        if _owner(o, models) is not None and (fresh or o.state)
    ]
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
    _init_state(optimizer)  # a no-op but when loading into a fresh optimizer
    return get_optimizer_state_dict(_owner(optimizer, models), optimizer)


def _init_state(optimizer: Any) -> None:
    """Give a fresh optimizer the state a checkpoint loads into: one step of zero
    gradients at a zero learning rate, which changes no parameter.

    torch's state_dict helpers do the same, but through ``optimizer.step``: the fp16
    scaler's step (which refuses their ``closure=None``), LR schedulers' step counters
    and anything else wrapped around it would see a step. The class's own step does not.
    """
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    if optimizer.state or any(p.grad is not None for p in params):
        return
    for param in params:
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    rates = [group.get("lr") for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        if "lr" in group:
            group["lr"] = torch.tensor(0.0) if isinstance(group["lr"], torch.Tensor) else 0.0
    try:
        type(optimizer).step(optimizer)
    finally:
        for group, rate in zip(optimizer.param_groups, rates, strict=True):
            if "lr" in group:
                group["lr"] = rate
        optimizer.zero_grad(set_to_none=True)


def save_parts(models: Sequence[Any], optimizers: Sequence[Any]) -> Parts:
    """(model states, optimizer states, sharded state or None): ``{}`` stands in the
    first two for what the sharded state holds. A collective when something is sharded."""
    names = sharded_names(models, optimizers, fresh=False)
    sharded = {name: _sharded_state(name, models, optimizers) for name in names}
    model_states = [{} if f"model.{i}" in sharded else m.state_dict() for i, m in enumerate(models)]
    optim_states = [
        {} if f"optimizer.{j}" in sharded else o.state_dict() for j, o in enumerate(optimizers)
    ]
    return model_states, optim_states, sharded or None


def load_parts(
    checkpoints: Any,
    step: int,
    state: dict[str, Any],
    models: Sequence[Any],
    optimizers: Sequence[Any],
) -> frozenset[str]:
    """Restore the objects of checkpoint ``step`` that one side of it shards, in place;
    their names. ``state``: the checkpoint's replicated state (``sharded`` names what its
    ``sharded/`` folder holds). A checkpoint of sharded models loads into a run that
    shards none (one process, or FSDP off), gathered whole; one of whole models into a
    run that shards them, each rank keeping its shard: the world size may change."""
    saved = [str(name) for name in state.get("sharded") or []]
    names = sharded_names(models, optimizers)
    try:
        if saved and not names:
            return _gathered(checkpoints, step, saved, models, optimizers)
        if names and not saved:
            return _scattered(state, names, models, optimizers)
        models_differ = {n for n in names if n.startswith("model.")} != {
            n for n in saved if n.startswith("model.")
        }
        if models_differ or not set(saved) <= set(names):
            raise UsageError(
                f"the checkpoint of step {step} holds {_described(saved)} but this run has "
                f"{_described(names)}; load it with the FSDP setting of the run that saved "
                "it (launch.fsdp / --fsdp)"
            )
        if not saved:
            return frozenset()
        target = {name: _sharded_state(name, models, optimizers) for name in saved}
        checkpoints.load_sharded(target, step)
        _set(target, models, optimizers, owner=_owner)
        return frozenset(saved)
    except DoesNotFit as exc:
        from accel.accelerator._resume import does_not_fit

        raise does_not_fit(step, "sharded state", str(exc)) from None


def _set(
    target: dict[str, Any], models: Sequence[Any], optimizers: Sequence[Any], **how: Any
) -> None:
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = how.get("options")
    for name, part in target.items():
        kind, index = name.split(".")
        try:
            if kind == "model":
                set_model_state_dict(models[int(index)], part, options=options)
            else:
                optimizer = optimizers[int(index)]
                owner = how["owner"](optimizer, models)
                set_optimizer_state_dict(owner, optimizer, part, options=options)
        except (RuntimeError, ValueError, KeyError) as exc:  # keys or shapes of another model
            from accel.errors import one_line

            raise DoesNotFit(one_line(exc)) from None


def _gathered(
    checkpoints: Any, step: int, saved: Sequence[str], models: Sequence[Any], optimizers: Any
) -> frozenset[str]:
    """A sharded checkpoint into whole models: DCP reads every shard into whole tensors."""
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    target: dict[str, Any] = {}
    for name in saved:
        kind, index = name.split(".")
        objs = models if kind == "model" else optimizers
        if int(index) >= len(objs):
            continue  # a count that differs: said below, as for a whole checkpoint
        if kind == "model":
            target[name] = get_model_state_dict(models[int(index)])
            continue
        optimizer = optimizers[int(index)]
        owner = _plain_owner(optimizer, models)
        if owner is None:
            continue
        _init_state(optimizer)
        target[name] = get_optimizer_state_dict(owner, optimizer)
    checkpoints.load_sharded(target, step)
    _set(target, models, optimizers, owner=_plain_owner)
    return frozenset(target)


def _scattered(
    state: dict[str, Any], names: Sequence[str], models: Sequence[Any], optimizers: Any
) -> frozenset[str]:
    """A checkpoint of whole models into sharded ones: every rank read the whole state
    and keeps its shard of it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    target: dict[str, Any] = {}
    for name in names:
        kind, index = name.split(".")
        whole = list(state.get("models" if kind == "model" else "optimizers") or [])
        if int(index) >= len(whole):
            continue  # a count that differs: said below, as for a whole checkpoint
        part = whole[int(index)]
        if kind == "model":
            target[name] = part
        elif isinstance(part, dict) and part.get("state"):  # a fresh one is loaded as is
            optimizer = optimizers[int(index)]
            target[name] = _by_name(part, optimizer, _owner(optimizer, models))
    _set(target, models, optimizers, owner=_owner, options=StateDictOptions(full_state_dict=True))
    return frozenset(target)


def _by_name(saved: dict[str, Any], optimizer: Any, model: Any) -> dict[str, Any]:
    """``optimizer.state_dict()``'s form (parameters by position) in the form torch's
    sharded helpers take (parameters by name), for the parameters ``optimizer`` steps."""
    named = {id(p): fqn for fqn, p in model.named_parameters()}
    order = [named.get(id(p)) for group in optimizer.param_groups for p in group["params"]]
    groups = list(saved.get("param_groups") or [])
    positions = [i for group in groups for i in group.get("params", [])]
    if len(positions) != len(order) or None in order:
        raise DoesNotFit(
            f"the optimizer steps {len(order)} parameters, the checkpoint's {len(positions)}"
        )
    fqn = dict(zip(positions, order, strict=True))
    return {
        "state": {fqn[i]: value for i, value in saved.get("state", {}).items() if i in fqn},
        "param_groups": [
            {**group, "params": [fqn[i] for i in group["params"]]} for group in groups
        ],
    }


def _plain_owner(optimizer: Any, models: Sequence[Any]) -> Any:
    """The model whose parameters ``optimizer`` steps, sharded or not, if any."""
    mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return next((m for m in models if any(id(p) in mine for p in m.parameters())), None)


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
