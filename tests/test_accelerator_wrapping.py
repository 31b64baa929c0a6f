"""What ``prepare`` does to a model, and what ``unwrap_model`` and ``autocast`` give back:
copies, pickles and decorators behave as with Hugging Face Accelerate (one process)."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
import torch

import accel


def _bf16() -> tuple[accel.Accelerator, torch.nn.Module, torch.Tensor]:
    acc = accel.Accelerator(mixed_precision="bf16", cpu=True)
    torch.manual_seed(0)
    return acc, acc.prepare(torch.nn.Linear(4, 2)), torch.randn(3, 4)


def _fp32(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, model.weight, model.bias)


def test_a_deepcopy_of_a_prepared_model_runs_its_own_weights(project: Path) -> None:
    acc, model, x = _bf16()
    before = model(x)
    ema = copy.deepcopy(acc.unwrap_model(model))
    assert torch.equal(ema(x), before)  # autocast and fp32 outputs, as the model's
    assert ema(x).dtype == torch.float32 and not torch.equal(before, _fp32(model, x))
    with torch.no_grad():
        for p in ema.parameters():
            p.zero_()
    assert torch.equal(ema(x), torch.zeros(3, 2))  # not the live model's weights
    assert torch.equal(model(x), before)


def test_unwrap_model_without_the_fp32_wrapper_puts_forward_back(project: Path) -> None:
    acc, model, x = _bf16()
    assert acc.unwrap_model(model) is model and "forward" in vars(model)  # kept by default
    assert acc.unwrap_model(model, keep_fp32_wrapper=False) is model
    assert "forward" not in vars(model) and "_original_forward" not in vars(model)
    assert torch.equal(model(x), _fp32(model, x))  # no autocast any more

    own = torch.nn.Linear(4, 2)
    mine = own.forward
    own.forward = lambda t: mine(t) * 2  # a forward the script set itself
    plain = own.forward
    acc.prepare(own)
    assert own.forward is not plain
    assert acc.unwrap_model(own, keep_fp32_wrapper=False).forward is plain


def test_preparing_a_model_twice_wraps_its_forward_once(project: Path) -> None:
    acc, model, x = _bf16()
    acc.prepare(model)
    acc.unwrap_model(model, keep_fp32_wrapper=False)
    assert torch.equal(model(x), _fp32(model, x))


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_a_prepared_model_pickles_whole(project: Path, precision: str) -> None:
    acc = accel.Accelerator(mixed_precision=precision, cpu=True)
    model = acc.prepare(torch.nn.Linear(4, 2))
    optimizer = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    buffer = io.BytesIO()
    torch.save(acc.unwrap_model(model), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x = torch.randn(3, 4)
    assert torch.equal(loaded(x), _fp32(model, x))
    loaded.load_state_dict(model.state_dict())  # its hook is a no-op now
    waits: list[int] = []
    acc.wait_for_snapshot = lambda: waits.append(1)  # type: ignore[method-assign]
    model.load_state_dict(model.state_dict())
    optimizer.load_state_dict(optimizer.state_dict())
    copy.deepcopy(model).load_state_dict(model.state_dict())
    assert waits == [1, 1, 1]  # still waits for a snapshot in flight


def test_autocast_is_a_decorator_too(project: Path) -> None:
    for precision in ("no", "bf16"):  # without mixed precision too, as Accelerate's
        acc = accel.Accelerator(mixed_precision=precision, cpu=True)

        @acc.autocast()
        def inside() -> bool:
            return torch.is_autocast_enabled("cpu")

        assert inside() is (precision == "bf16")
        assert inside() is (precision == "bf16")  # reusable
        with acc.autocast():
            assert torch.is_autocast_enabled("cpu") is (precision == "bf16")
