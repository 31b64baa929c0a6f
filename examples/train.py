"""A small, complete training script for ``accel launch``.

    accel launch -n 2 examples/train.py              # train, checkpointing as it goes
    accel launch -n 2 examples/train.py --steps 400  # again: resumes where it stopped
    accel launch -n 2 --max-restarts 2 examples/train.py   # survives a crashing rank

It fits a small MLP to synthetic regression data made right here (no downloads).
Everything that makes it resumable goes through ``accel.Accelerator``: ``prepare()``
shards the data across ranks and wraps the model in DDP, ``save_state()`` commits a
checkpoint (model, optimizer, data order, RNG), ``load_state()`` restores the latest
one. A resumed run ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="total optimizer steps")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--save-every", type=int, default=50, help="steps between checkpoints")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lr-decay", type=float, default=1.0, help="the LR's factor per step (1: constant)"
    )
    return parser.parse_args()


def synthetic_data(n: int = 4096, features: int = 16, seed: int = 1234) -> TensorDataset:
    """The same noisy linear data on every rank and every run."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 1, generator=g))


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(seed=args.seed)
    torch.manual_seed(args.seed)  # the same initial weights on every rank

    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = DataLoader(synthetic_data(), batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    scheduler = None
    if args.lr_decay != 1.0:  # an LR scheduler, stepped after every optimizer step
        decay = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=args.lr_decay)
        scheduler = accelerator.prepare(decay)

    accelerator.print(f"{accelerator.world_size} worker(s) on {accelerator.device.type}")
    step = accelerator.load_state() or 0
    if step:
        accelerator.print(f"resumed from the checkpoint of step {step}")
    epoch, done_in_epoch = divmod(step, len(loader))
    loss = None

    while step < args.steps:
        loader.set_epoch(epoch)
        loader.skip_batches(done_in_epoch)  # mid-epoch resume: the batches already seen
        done_in_epoch = 0
        for x, y in loader:
            x, y = x.to(accelerator.device), y.to(accelerator.device)
            with accelerator.autocast():
                loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            step += 1
            if step % args.log_every == 0:
                accelerator.log({"loss": loss.item(), "epoch": epoch}, step)
                accelerator.print(f"step {step:5d}  epoch {epoch}  loss {loss.item():.5f}")
            if step % args.save_every == 0 or step == args.steps:
                accelerator.save_state(step)
            if step == args.steps:
                break
        epoch += 1

    if loss is None:
        accelerator.print(f"nothing to do: already at step {step} (ask for more with --steps)")
    else:
        accelerator.print(f"done: {step} steps, final loss {loss.item():.5f}")
    accelerator.end()  # waits for every rank and for pending checkpoint writes


if __name__ == "__main__":
    main()
