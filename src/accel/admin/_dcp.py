"""A sharded checkpoint's state (``sharded/``, written by ``torch.distributed.checkpoint``)
for ``accel checkpoints export``: its tree rebuilt from DCP's metadata, and the chosen
entries consolidated into full tensors in this process.

The metadata is read once and checked (:func:`accel.store.sharded.read_metadata`:
accel's restricted unpickler, then every entry); that one object gives the tree and is
what DCP's loader gets (:func:`accel.store.sharded.load`, which never reopens
``.metadata`` and refuses any value that is not plain data). No process group is
needed: one process reads every rank's shard files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.store.hashing import FileDigest

__all__ = ["ShardRef", "Sharded", "load", "outline", "read"]


@dataclass(frozen=True)
class ShardRef:
    """A tensor entry of DCP metadata: its flat name and its full (unsharded) shape."""

    fqn: str
    dtype: Any
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Sharded:
    """A checkpoint's ``sharded/`` folder and its metadata, read once and checked."""

    folder: Path
    metadata: Any
    files: Mapping[str, FileDigest]  # the manifest's


def read(folder: Path, files: Mapping[str, FileDigest]) -> Sharded:
    """``folder``'s metadata, checked against the manifest's ``files``."""
    from accel.store import sharded as sharded_mod

    return Sharded(folder, sharded_mod.read_metadata(folder, files), files)


def outline(sharded: Sharded) -> Any:
    """The tree DCP saved, rebuilt from its metadata; tensor entries as :class:`ShardRef`,
    other values as their type name (never unpickled)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = sharded.metadata
    paths = metadata.planner_data or {}
    tree: dict[Any, Any] = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        path = tuple(paths.get(fqn) or (fqn,))
        if isinstance(entry, TensorStorageMetadata):
            leaf: Any = ShardRef(fqn, entry.properties.dtype, tuple(entry.size))
        else:
            leaf = type(entry).__name__
        _insert(tree, path, leaf)
    return _as_lists(tree)


def _insert(tree: dict[Any, Any], path: tuple[Any, ...], leaf: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = leaf


def _as_lists(node: Any) -> Any:
    """Folders whose keys are 0..n-1 were lists when saved."""
    if not isinstance(node, dict):
        return node
    items = {k: _as_lists(v) for k, v in node.items()}
    if items and all(type(k) is int for k in items) and sorted(items) == list(range(len(items))):
        return [items[i] for i in range(len(items))]
    return items


def load(sharded: Sharded, names: dict[str, Any]) -> dict[str, Any]:
    """The tensors ``names`` maps to :class:`ShardRef`, full size, by those names."""
    import torch

    from accel.store import sharded as sharded_mod
    from accel.store.collectives import SINGLE

    target = {ref.fqn: torch.empty(ref.shape, dtype=ref.dtype) for ref in names.values()}
    sharded_mod.load(target, sharded.folder, sharded.metadata, sharded.files, SINGLE)
    return {name: target[ref.fqn] for name, ref in names.items()}
