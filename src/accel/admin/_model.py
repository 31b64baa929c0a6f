"""Which part of a saved state is "the model", and its tensors by name (pure).

A checkpoint holds whatever tree was saved. The model is, in this order:

1. ``--model PATH``: the subtree at that dotted path (``models.0``, ``model``,
   ``net.encoder``); list items by index.
2. ``Accelerator.save_state``: ``{"models": [state_dict, ...], ...}`` -- the one model
   (several: choose with ``--model models.N``); under FSDP the models are in the sharded
   state as ``model.N`` entries (:mod:`accel.accelerator._fsdp.state` names them), and
   ``--model models.N`` names those too.
3. ``ws.checkpoints.save({"model": sd, "optimizer": ...})``: the first of the keys
   ``model``, ``model_state_dict``, ``state_dict`` that holds tensors.
4. ``ws.checkpoints.save(model.state_dict())``: the whole tree, when every leaf of it
   is a tensor.

Anything else is refused with the top-level keys, so that ``--model`` can say. The
names of the exported tensors are the paths below the chosen subtree joined by
``.``, as ``state_dict()`` names them. Works on outlines (tensors described, not
loaded) and on loaded trees alike: ``is_tensor`` says which leaves are tensors.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from accel.errors import UsageError

__all__ = ["MODEL_KEYS", "Path_", "find_model", "flatten", "parse_path", "subtree"]

Path_ = tuple[str | int, ...]
IsTensor = Callable[[Any], bool]
MODEL_KEYS = ("model", "model_state_dict", "state_dict")
_SHARDED_MODEL = re.compile(r"model\.[0-9]+")


def parse_path(text: str) -> tuple[str, ...]:
    parts = tuple(text.split("."))
    if not text or any(not p for p in parts):
        raise UsageError(f"invalid --model {text!r}: use a dotted path such as models.0 or model")
    return parts


def subtree(tree: Any, path: Path_) -> Any:
    """The node at ``path`` (which :func:`find_model` or :func:`resolve` returned)."""
    for part in path:
        tree = tree[part]
    return tree


def resolve(tree: Any, where: tuple[str, ...]) -> Path_ | None:
    """The path ``where`` names in ``tree`` (list items by their index), None if none."""
    path: list[str | int] = []
    for part in where:
        step = _child(tree, part)
        if step is None:
            return None
        path.append(step)
        tree = tree[step]
    return tuple(path)


def _child(tree: Any, part: str) -> str | int | None:
    if isinstance(tree, dict) and part in tree:
        return part
    index = int(part) if part.isascii() and part.isdigit() else None
    if index is None:
        return None
    if isinstance(tree, (list, tuple)):
        return index if index < len(tree) else None
    return index if isinstance(tree, dict) and index in tree else None


def find_model(
    tree: Any, is_tensor: IsTensor, where: tuple[str, ...] | None = None
) -> Path_ | None:
    """The path of the model in ``tree`` (rules above); None when there is none.

    UsageError when the choice is the user's: several models and no ``where``.
    """
    if where is not None:
        path = _sharded_model(tree, where) or resolve(tree, where)
        return path if path is not None and _has_tensors(subtree(tree, path), is_tensor) else None
    if not isinstance(tree, dict):
        return None
    models = tree.get("models")
    if isinstance(models, (list, tuple)) and models:
        if len(models) > 1:
            raise UsageError(
                f"the checkpoint holds {len(models)} models: choose one with "
                f"--model models.0 ... --model models.{len(models) - 1}"
            )
        if _has_tensors(models[0], is_tensor):
            return ("models", 0)
    sharded = [k for k in tree if isinstance(k, str) and _SHARDED_MODEL.fullmatch(k)]
    if len(sharded) > 1:
        raise UsageError(
            f"the checkpoint holds {len(sharded)} sharded models: choose one with "
            f"--model models.0 ... --model models.{len(sharded) - 1}"
        )
    if sharded and _has_tensors(tree[sharded[0]], is_tensor):
        return (sharded[0],)
    for name in MODEL_KEYS:
        if isinstance(tree.get(name), dict) and _has_tensors(tree[name], is_tensor):
            return (name,)
    leaves = list(_leaves(tree, ()))
    if leaves and all(is_tensor(v) for _, v in leaves):
        return ()
    return None


def _sharded_model(tree: Any, where: tuple[str, ...]) -> Path_ | None:
    """``models.N`` in a sharded state, where FSDP models are the ``model.N`` entries."""
    if len(where) != 2 or where[0] != "models" or not isinstance(tree, dict):
        return None
    name = f"model.{where[1]}"
    return (name,) if name in tree else None


def flatten(tree: Any, is_tensor: IsTensor) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``(tensors by dotted name, names of the leaves that are not tensors)``.

    UsageError when two leaves get one name (``{"a.b": x, "a": {"b": y}}``).
    """
    named: dict[str, Any] = {}
    skipped: list[str] = []
    for path, value in _leaves(tree, ()):
        name = ".".join(str(p) for p in path)
        if not is_tensor(value):
            skipped.append(name)
        elif name in named:
            raise UsageError(f"two tensors of the model are both named {name!r}; use --model")
        else:
            named[name] = value
    return named, tuple(skipped)


def _has_tensors(tree: Any, is_tensor: IsTensor) -> bool:
    return any(is_tensor(v) for _, v in _leaves(tree, ()))


def _leaves(tree: Any, path: Path_) -> Any:
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _leaves(v, (*path, i))
    else:
        yield path, tree


def top_level(tree: Any) -> str:
    """The top-level keys of ``tree``, for a message that says what ``--model`` may be."""
    if isinstance(tree, dict) and tree:
        return "its top-level keys are " + ", ".join(repr(str(k)) for k in list(tree)[:12])
    return f"it holds a {type(tree).__name__}, not a dict of tensors"
