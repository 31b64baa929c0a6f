"""Train a tiny model on every rank, then call save_state on the ranks listed in argv[1]
only ("0" is Hugging Face Accelerate's `if accelerator.is_main_process: save_state()`);
argv[2] "load" calls load_state the same way instead; "later" saves on every rank first
(async: the save's group exists), then an async save on the listed ranks only."""

import sys

import torch

import accel

ranks = {int(r) for r in sys.argv[1].split(",")}
action = sys.argv[2] if len(sys.argv) > 2 else "save"
acc = accel.Accelerator(cpu=True)
model = acc.prepare(torch.nn.Linear(4, 1))
optimizer = acc.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
STEPS = 3
for _ in range(STEPS):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    acc.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
if action == "later":
    acc.save_state(STEPS, async_save=True)
    acc.checkpoints.wait()
if acc.rank in ranks:
    if action == "load":
        acc.load_state()
    else:
        acc.save_state(
            STEPS + 1 if action == "later" else STEPS,
            async_save=True if action == "later" else None,
        )
        print(f"rank {acc.rank} save_state returned", flush=True)
print(f"rank {acc.rank} done", flush=True)
acc.end()
