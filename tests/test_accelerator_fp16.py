"""fp16 in accel.Accelerator: a gradient scaler, on the CPU as on CUDA.

Each result is compared with torch's own ``GradScaler`` loop on the same model and data,
bit for bit: the Accelerator must add nothing and forget nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import accel


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _batches(n: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(n)]


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, big: float) -> Any:
    return torch.nn.functional.mse_loss(model(x).float(), y) * big


def _reference(steps: list[tuple[torch.Tensor, torch.Tensor]], big: float = 1.0) -> Any:
    """torch's documented fp16 loop: autocast, scaler.scale().backward(), step, update."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu")
    for x, y in steps:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _loss(model, x, y, big)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return model, scaler


def _accelerated(
    steps: list[tuple[torch.Tensor, torch.Tensor]], big: float = 1.0
) -> tuple[accel.Accelerator, Any, Any]:
    """The same loop as a script writes it for accel: acc.backward(loss), opt.step()."""
    acc = accel.Accelerator(mixed_precision="fp16", cpu=True)
    model = _model()
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    for x, y in steps:
        with acc.autocast():
            loss = _loss(model, x, y, big)
        opt.zero_grad()
        acc.backward(loss)
        opt.step()
    return acc, model, opt


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_fp16_training_matches_torchs_grad_scaler_loop_bit_for_bit(project: Path) -> None:
    steps = _batches()
    acc, model, _ = _accelerated(steps)
    expected, scaler = _reference(steps)
    assert acc.scaler is not None and acc.scaler.is_enabled()
    assert _same(model, expected)
    assert acc.scaler.get_scale() == scaler.get_scale()


def test_an_overflowing_step_is_skipped_and_the_scale_backs_off(project: Path) -> None:
    steps = _batches(1)
    acc, model, _ = _accelerated(steps, big=1e30)  # scaled fp16 gradients overflow
    assert _same(model, _model())  # no step taken: the weights are the initial ones
    assert acc.scaler.get_scale() == 65536.0 * 0.5


def test_the_scale_is_checkpointed_and_restored(project: Path) -> None:
    acc, _, _ = _accelerated(_batches(1), big=1e30)
    acc.save_state(1)
    acc.end()
    fresh = accel.Accelerator(mixed_precision="fp16", cpu=True)
    model = _model()
    fresh.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    assert fresh.scaler.get_scale() == 65536.0
    assert fresh.load_state() == 1
    assert fresh.scaler.get_scale() == 32768.0
    fresh.end()


def test_clip_grad_norm_sees_the_true_gradients(project: Path) -> None:
    ((x, y),) = _batches(1)
    acc = accel.Accelerator(mixed_precision="fp16", cpu=True)
    model = _model()
    opt = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.05))
    with acc.autocast():
        loss = _loss(model, x, y, 1.0)
    acc.backward(loss)
    norm = acc.clip_grad_norm_(model.parameters(), 1e9)

    plain = _model()
    with torch.autocast("cpu", dtype=torch.float16):
        _loss(plain, x, y, 1.0).backward()
    true_norm = torch.nn.utils.clip_grad_norm_(plain.parameters(), 1e9)
    assert float(norm) == pytest.approx(float(true_norm), rel=1e-2)
    opt.step()  # unscaled once, not twice
    assert acc.scaler.get_scale() == 65536.0


def test_schedulers_before_and_after_prepare_and_a_second_prepare(project: Path) -> None:
    acc = accel.Accelerator(mixed_precision="fp16", cpu=True)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt = acc.prepare(opt)
    opt = acc.prepare(opt)  # no double scaling
    after = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ((x, y),) = _batches(1)
    with acc.autocast():
        loss = _loss(model, x, y, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "lr_scheduler.step() before optimizer.step()"
        acc.backward(loss)
        opt.step()
        before.step()
        after.step()
    assert acc.scaler.get_scale() == 65536.0
    assert before.get_last_lr() == [0.025] and after.get_last_lr() == [0.0125]


def test_bf16_and_fp32_have_no_scaler(project: Path) -> None:
    assert accel.Accelerator(mixed_precision="bf16", cpu=True).scaler is None
    assert accel.Accelerator(mixed_precision="no", cpu=True).scaler is None
