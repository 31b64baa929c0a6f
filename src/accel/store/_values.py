"""What may be stored where: JSON values for the store, safe trees for tensor files."""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from typing import Any

from accel.errors import UsageError

_JSON_SCALARS = (str, int, float, bool, type(None))


def json_problem(value: Any, where: str = "value") -> str | None:
    """Why ``value`` is not a JSON value (dict/list/str/int/float/bool/None), or None."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where} is {value!r}, which JSON cannot represent"
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            problem = json_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the non-string key {key!r}"
            problem = json_problem(item, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    return f"{where} is a {type(value).__name__}"


def require_json(value: Any, what: str) -> None:
    problem = json_problem(value)
    if problem:
        raise UsageError(
            f"{what}: {problem}; only JSON values (dict with str keys, list, str, int, "
            "finite float, bool, None) can be stored"
        )


def tensor_tree_problem(value: Any, where: str = "state") -> str | None:
    """Why ``value`` cannot be stored in a tensor file (no pickle), or None.

    Checked before anything is written, so a bad value fails the call, not the file.
    """
    if isinstance(value, (*_JSON_SCALARS, bytes, complex)):
        return None
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            problem = tensor_tree_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                return f"{where} has the key {key!r} of type {type(key).__name__}"
            problem = tensor_tree_problem(item, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, (torch.Tensor, torch.Size, torch.dtype)):
        if isinstance(value, torch.Tensor) and not _plain_tensor(torch, value):
            return f"{where} is a {type(value).__name__}, not a plain dense tensor"
        return None
    if torch is not None and isinstance(value, torch.device):
        return None
    return f"{where} is a {type(value).__module__}.{type(value).__qualname__}"


def _plain_tensor(torch: Any, value: Any) -> bool:
    return type(value) in (torch.Tensor, torch.nn.Parameter) and value.layout == torch.strided


def require_tensor_tree(value: Any, what: str) -> None:
    problem = tensor_tree_problem(value)
    if problem:
        raise UsageError(
            f"{what}: {problem}; only tensors, numbers, strings, bytes, None and "
            "dicts/lists/tuples of them can be stored (convert other objects first)"
        )
