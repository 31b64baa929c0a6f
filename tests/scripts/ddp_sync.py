"""Two ranks whose models start apart: ``ddp_sync.py MODE OUT``, each rank writes
OUT/rank-<R>.pt (its parameters and buffer after one training step) and
OUT/broadcasts-<R>.txt (the shapes ``dist.broadcast`` took in that step) or, when
``prepare()`` refuses, OUT/refused-<R>.txt (the message) and exits 3.

MODE ``fresh``: every rank seeds its own weights and buffer; DDP must bring them to rank
0's. ``save``: rank-0 weights everywhere, saved as checkpoint step 1. ``resume``: weights
apart again, then ``load_state()`` of that checkpoint; the buffer (not in the state dict,
and DDP told not to broadcast buffers at each forward) apart too. ``shapes``: rank 1's
model is wider. ``wrapped``: the model is given to ``prepare()`` in a DDP of the
script's own."""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from accel import Accelerator
from accel.errors import UsageError

mode, out = sys.argv[1], Path(sys.argv[2])
rank = int(os.environ["RANK"])


class DistributedDataParallelKwargs:  # Accelerate's handler, read by its name
    def __init__(self) -> None:
        self.broadcast_buffers = False


class Net(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Linear(width, 1))
        self.register_buffer("scale", torch.full((1,), 1.0 + rank), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) * self.scale


broadcasts: list[list[int]] = []  # the shapes broadcast in the training step
_broadcast = dist.broadcast


def counted(tensor: torch.Tensor, *args: object, **kwargs: object) -> object:
    broadcasts.append(list(tensor.shape))
    return _broadcast(tensor, *args, **kwargs)


dist.broadcast = counted
acc = Accelerator(cpu=True, kwargs_handlers=[DistributedDataParallelKwargs()])
torch.manual_seed(0 if mode == "save" else 100 + rank)
base = Net(16 if mode != "shapes" or rank == 0 else 32)
wrapped = base
if mode == "wrapped":  # as a torchrun script does it
    wrapped = torch.nn.parallel.DistributedDataParallel(base)
try:
    model, opt = acc.prepare(wrapped, torch.optim.SGD(base.parameters(), lr=0.1))
except UsageError as exc:
    (out / f"refused-{rank}.txt").write_text(str(exc))
    sys.exit(3)
if mode == "resume":
    assert acc.load_state() == 1
x = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))
broadcasts.clear()  # those of the training step alone
opt.zero_grad()
acc.backward(model(x).sum())
opt.step()
if mode == "save":
    acc.save_state(1)
state = {k: v.clone() for k, v in base.state_dict().items()}
torch.save({**state, "scale": base.scale.clone()}, out / f"rank-{rank}.pt")
(out / f"broadcasts-{rank}.txt").write_text(repr(broadcasts))
acc.end()
