"""Which part of a saved state is the model (pure: outlines, no files)."""

from __future__ import annotations

from typing import Any

import pytest

from accel.admin._model import find_model, flatten, parse_path, subtree
from accel.errors import UsageError


class T:
    """A tensor leaf of an outline."""


def is_t(value: Any) -> bool:
    return isinstance(value, T)


SD = {"0.weight": T(), "0.bias": T(), "norm": {"running_mean": T(), "num_batches_tracked": T()}}


@pytest.mark.parametrize(
    ("tree", "path"),
    [
        ({"step": 3, "models": [SD], "optimizers": [{"lr": 0.1}], "extra": None}, ("models", 0)),
        ({"model": SD, "optimizer": {"state": {0: {"m": T()}}}, "epoch": 2}, ("model",)),
        ({"model_state_dict": SD, "optimizer_state_dict": {"m": T()}}, ("model_state_dict",)),
        ({"state_dict": SD, "epoch": 1}, ("state_dict",)),
        (SD, ()),
        ({"models": [], "model": SD}, ("model",)),
    ],
)
def test_the_rules_find_the_model(tree: Any, path: tuple[Any, ...]) -> None:
    assert find_model(tree, is_t) == path


@pytest.mark.parametrize(
    "tree",
    [{"encoder": SD, "lr": 0.1}, {"step": 1}, [T()], {}, {"model": {"lr": 0.1}, "x": 1}],
)
def test_nothing_is_guessed(tree: Any) -> None:
    assert find_model(tree, is_t) is None


def test_several_models_need_a_choice() -> None:
    tree = {"models": [SD, {"w": T()}], "step": 1}
    with pytest.raises(UsageError, match=r"2 models: choose one with --model models.0"):
        find_model(tree, is_t)
    assert find_model(tree, is_t, parse_path("models.1")) == ("models", 1)
    assert flatten(subtree(tree, ("models", 1)), is_t)[0].keys() == {"w"}


def test_a_path_names_dict_keys_and_list_items() -> None:
    tree = {"nets": {"enc": SD, "heads": [{"w": T()}]}, 0: {"v": T()}}
    assert find_model(tree, is_t, ("nets", "enc")) == ("nets", "enc")
    assert find_model(tree, is_t, ("nets", "heads", "0")) == ("nets", "heads", 0)
    assert find_model(tree, is_t, ("0",)) == (0,)
    for missing in (
        ("nets", "dec"),
        ("nets", "heads", "1"),
        ("nets", "heads", "x"),
        ("0", "v", "z"),
    ):
        assert find_model(tree, is_t, missing) is None


def test_flatten_names_like_state_dict_and_reports_what_is_not_a_tensor() -> None:
    named, skipped = flatten({"a": {"b": T(), "c": [T(), "x"]}, "d": 3}, is_t)
    assert list(named) == ["a.b", "a.c.0"] and skipped == ("a.c.1", "d")
    with pytest.raises(UsageError, match="both named 'a.b'"):
        flatten({"a.b": T(), "a": {"b": T()}}, is_t)


@pytest.mark.parametrize("text", ["", ".", "a..b", "a.", ".a"])
def test_a_bad_path_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="invalid --model"):
        parse_path(text)
