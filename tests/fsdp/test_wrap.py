"""The wrapping policy: which modules FSDP shards before the root, children first."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accel.accelerator._fsdp.shard import wrap_targets
from accel.config.fsdp import FsdpSettings
from accel.errors import UsageError


class Block(nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.attn = nn.Linear(width, width)  # 20 parameters
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attn(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(4, 1)


def names(model: nn.Module, settings: FsdpSettings) -> list[str]:
    by_id = {id(m): name for name, m in model.named_modules()}
    return [by_id[id(m)] for m in wrap_targets(model, settings)]


def test_transformer_wraps_the_blocks_of_a_module_list_by_default() -> None:
    assert names(Net(), FsdpSettings()) == ["blocks.0", "blocks.1"]


def test_transformer_wraps_the_classes_named_children_first() -> None:
    settings = FsdpSettings(layer_classes=("Block", "Sequential"))
    assert names(Net(), settings) == ["blocks.0.mlp", "blocks.0", "blocks.1.mlp", "blocks.1"]


def test_transformer_uses_a_hugging_face_models_no_split_modules() -> None:
    model = Net()
    model._no_split_modules = ["Sequential"]  # type: ignore[assignment]
    assert names(model, FsdpSettings()) == ["blocks.0.mlp", "blocks.1.mlp"]


def test_a_class_the_model_lacks_is_refused_naming_what_it_has() -> None:
    with pytest.raises(UsageError) as caught:
        wrap_targets(Net(), FsdpSettings(layer_classes=("Block", "LlamaDecoderLayer")))
    message = str(caught.value)
    assert "'LlamaDecoderLayer'" in message and "Block, Linear, ModuleList, Net" in message


def test_no_module_list_and_no_classes_shards_the_root_only() -> None:
    mlp = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    assert names(mlp, FsdpSettings()) == []


def test_size_counts_bottom_up_what_no_sharded_descendant_holds() -> None:
    # Parameters: embed 16; per block attn 20, mlp.0 40, mlp.1 36 (mlp 76, block 96); head 5.
    model = Net()
    assert names(model, FsdpSettings(wrap="size", min_params=96)) == ["blocks.0", "blocks.1"]
    # 40: an mlp's first Linear; its mlp keeps 36, but the block's 20 + 36 reach 40.
    assert names(model, FsdpSettings(wrap="size", min_params=40)) == [
        "blocks.0.mlp.0",
        "blocks.0",
        "blocks.1.mlp.0",
        "blocks.1",
    ]
    # 56: an mlp's 76 reaches it; a block then keeps its attn's 20, the list 40.
    assert names(model, FsdpSettings(wrap="size", min_params=56)) == [
        "blocks.0.mlp",
        "blocks.1.mlp",
    ]
    assert names(model, FsdpSettings(wrap="size", min_params=10**9)) == []
    assert names(model, FsdpSettings(wrap="size", min_params=0)) == []  # as Accelerate


def test_none_shards_the_root_only() -> None:
    assert names(Net(), FsdpSettings(wrap="none", layer_classes=("Block",))) == []


def test_a_module_shared_by_two_parents_is_sharded_once() -> None:
    shared = Block()
    model = Net()
    model.blocks = nn.ModuleList([shared, Block()])
    model.extra = nn.ModuleList([shared])
    targets = wrap_targets(model, FsdpSettings())
    assert len(targets) == 2 and targets[0] is shared
