"""Collectives over nested tensors, with Hugging Face Accelerate's semantics.

``gather`` concatenates every rank's tensors along the first dimension (a 0-d tensor
becomes one element per rank), ``reduce`` sums (or averages, or takes the maximum),
``pad_across_processes`` pads a dimension to the largest size any rank has, and
``split_rows`` gives each rank its contiguous slice of a list, tensor or dict, as
``accelerate.utils`` does. With one process every call returns its input (``reduce``
a copy), as there.

Each works on a tensor or on lists, tuples and dicts of tensors (other leaves are an
error, as in Accelerate); ``gather_object`` on anything picklable.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from accel.errors import UsageError

REDUCTIONS = ("sum", "mean", "max")


def world() -> int:
    """The size of the default process group (1 when there is none)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_world_size())
    return 1


def apply(func: Callable[..., Any], data: Any, *args: Any, **kwargs: Any) -> Any:
    """``func`` on every tensor of a nested list/tuple/dict, the structure kept."""
    import torch

    if isinstance(data, (tuple, list)):
        items = [apply(func, item, *args, **kwargs) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*items)
        return type(data)(items)
    if isinstance(data, Mapping):
        cls: Any = type(data)
        return cls({k: apply(func, v, *args, **kwargs) for k, v in data.items()})
    if isinstance(data, torch.Tensor):
        return func(data, *args, **kwargs)
    raise UsageError(
        f"{getattr(func, '__name__', 'the call').lstrip('_')} takes tensors or lists, tuples "
        f"and dicts of tensors, not a {type(data).__name__}; use gather_object for other values"
    )


def all_tensors(data: Any) -> bool:
    try:
        apply(lambda t: t, data)
    except UsageError:
        return False
    return True


def gather(data: Any) -> Any:
    """Every rank's tensors, concatenated along dimension 0 (a collective)."""
    if world() == 1:
        return data
    return apply(_gather_one, data)


def _gather_one(tensor: Any) -> Any:
    import torch
    import torch.distributed as dist

    if tensor.ndim == 0:
        tensor = tensor.clone()[None]
    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(world())]
    dist.all_gather(parts, tensor)
    return torch.cat(parts, dim=0)


def gather_object(obj: Any) -> Any:
    """Every rank's list (or object), flattened into one list in rank order."""
    if world() == 1:
        return obj
    import torch.distributed as dist

    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj)
    return [item for part in out for item in part]


def reduce(data: Any, reduction: str = "sum") -> Any:
    """The sum (or ``mean``, ``max``) of every rank's tensors, a copy on every rank."""
    if reduction not in REDUCTIONS:
        raise UsageError(f"reduction {reduction!r} is not one of {', '.join(REDUCTIONS)}")
    return apply(_reduce_one, data, reduction)


def _reduce_one(tensor: Any, reduction: str) -> Any:
    out = tensor.clone()
    if world() == 1:
        return out  # as Accelerate: no division by one process either
    import torch.distributed as dist

    dist.all_reduce(out, dist.ReduceOp.MAX if reduction == "max" else dist.ReduceOp.SUM)
    if reduction == "mean":
        out /= world()
    return out


def broadcast(data: Any, src: int = 0) -> Any:
    """Rank ``src``'s tensors on every rank (in place, as torch does)."""
    if world() == 1:
        return data
    import torch.distributed as dist

    def _broadcast_one(tensor: Any) -> Any:
        dist.broadcast(tensor, src=src)
        return tensor

    return apply(_broadcast_one, data)


def broadcast_object_list(objects: list[Any], src: int = 0) -> list[Any]:
    if world() > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(objects, src=src)
    return objects


def pad_across_processes(
    data: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False
) -> Any:
    """Each tensor padded along ``dim`` to the largest size on any rank (a collective)."""
    return apply(_pad_one, data, dim, pad_index, pad_first)


def _pad_one(tensor: Any, dim: int, pad_index: Any, pad_first: bool) -> Any:
    import torch

    if dim >= tensor.ndim or dim < -tensor.ndim:
        return tensor
    dim %= tensor.ndim
    sizes = gather(torch.tensor(tensor.shape, device=tensor.device)[None]).cpu()
    largest = int(max(int(s[dim]) for s in sizes))
    if largest == tensor.shape[dim]:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = largest
    out = tensor.new_zeros(tuple(shape)) + pad_index
    start = largest - tensor.shape[dim] if pad_first else 0
    index = tuple(
        slice(start, start + tensor.shape[dim]) if i == dim else slice(None)
        for i in range(len(shape))
    )
    out[index] = tensor
    return out


def split_rows(inputs: Any, rank: int, world_size: int, apply_padding: bool, device: Any) -> Any:
    """This rank's contiguous share of ``inputs`` (list, tuple, tensor, a Hugging Face
    ``datasets.Dataset``, or a dict of them); the first ranks take one more when it does
    not divide evenly."""
    if world_size == 1:
        return inputs
    length = len(inputs)
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise UsageError(
                "split_between_processes: every value of the dict must have one length"
            )
        length = lengths.pop() if lengths else 0
    per_rank, extras = divmod(length, world_size)
    start = rank * per_rank + min(rank, extras)
    end = start + per_rank + (1 if rank < extras else 0)
    width = per_rank + (1 if extras > 0 else 0)
    return _split(inputs, start, end, width if apply_padding else None, device)


def _split(inputs: Any, start: int, end: int, width: int | None, device: Any) -> Any:
    import torch

    if isinstance(inputs, dict):
        for key in inputs:  # in place, as Accelerate does
            inputs[key] = _split(inputs[key], start, end, width, device)
        return inputs
    # A rank past the end (fewer inputs than ranks) takes the last one, as Accelerate's:
    # an empty share would leave that rank nothing to run its collectives with.
    if _is_hf_dataset(inputs):
        rows = list(range(max(min(start, len(inputs) - 1), 0), min(end, len(inputs))))
        return inputs.select(rows + [len(inputs) - 1] * ((width or 0) - len(rows)))
    if not isinstance(inputs, (list, tuple, torch.Tensor)):
        return inputs  # anything else whole, as Accelerate gives it
    part: Any = inputs[start:end] if start < len(inputs) else inputs[-1:]
    if width is None:
        return part
    if isinstance(part, torch.Tensor):
        return pad_across_processes(part.to(device), pad_index=inputs[-1].to(device))
    return part + type(part)([inputs[-1]]) * (width - len(part))


def _is_hf_dataset(inputs: Any) -> bool:
    """A Hugging Face ``datasets.Dataset`` (looked up only where the script imported it)."""
    datasets = sys.modules.get("datasets")
    kind = getattr(datasets, "Dataset", None)
    return isinstance(kind, type) and isinstance(inputs, kind)
