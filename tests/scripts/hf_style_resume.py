"""A training script written for Hugging Face Accelerate, only its import changed.

``hf_style_resume.py OUT STOP``: gradient accumulation over a shuffled loader with a
scheduler and dropout on every rank; at step STOP (mid-epoch) it saves into
OUT/ckpt_<step> as Accelerate's checkpointing example does and exits; run again, it
resumes from the newest OUT/ckpt_<step> (``load_state`` + ``skip_first_batches``). STOP 0
runs through. Rank 0 writes the final weights and learning rate to OUT/final.json.
"""

import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator

out, stop = Path(sys.argv[1]), int(sys.argv[2])
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
torch.manual_seed(0)
data = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
loader = DataLoader(data, batch_size=4, shuffle=True)
model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)

saved = sorted(out.glob("ckpt_*"), key=lambda p: int(p.name.split("_")[1]))
start = 0
if saved:
    accelerator.load_state(str(saved[-1]))
    start = int(saved[-1].name.split("_")[1])
    accelerator.print(f"resumed at step {start}")
per_epoch = len(loader)
step = start
for epoch in range(start // per_epoch, 3):
    skip = start % per_epoch if epoch == start // per_epoch else 0
    batches = accelerator.skip_first_batches(loader, skip) if skip else loader
    for x, y in batches:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        step += 1
        if step == stop:
            accelerator.save_state(str(out / f"ckpt_{step}"))
            sys.exit(0)
if accelerator.is_main_process:
    weights = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    (out / "final.json").write_text(json.dumps({"weights": weights, "lr": scheduler.get_last_lr()}))
accelerator.end_training()
