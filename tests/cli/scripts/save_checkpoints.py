"""A training script of its own, run in the project folder by the checkpoint command tests.

Accelerator.save_state at steps 10 and 20 (series ``default``, step 20 tagged ``best``),
then the model's plain state dict at step 5 of series ``plain``; the state dict at
steps 20 and 5 goes to ``expected.pt``. The series lease it takes ends with it, as in
a real run.
"""

from __future__ import annotations

import torch

import accel
from accel.store.checkpoints import Checkpoints


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    net.register_buffer("scale", torch.arange(6, dtype=torch.bfloat16))
    return net


def main() -> None:
    net = model()
    acc = accel.Accelerator()
    acc.prepare(net)
    acc.save_state(10, extra={"loss": 0.5, "epoch": 1})
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    acc.save_state(20, tag="best", extra={"loss": 0.25, "epoch": 2})
    acc.end()
    Checkpoints(acc.workspace.layout, acc.workspace.settings.checkpoints, series="plain").save(
        net.state_dict(), 5
    )
    torch.save(net.state_dict(), "expected.pt")


if __name__ == "__main__":
    main()
