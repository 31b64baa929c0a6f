"""Lightning Fabric DDP on CPU: a small MLP, a few steps, a tqdm bar on rank 0.

argv: OUT NAME. Rank 0 writes OUT/NAME.json: the final weights' sha256 and the losses.
"""

import hashlib
import json
import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

out, name = sys.argv[1], sys.argv[2]
fabric = L.Fabric(accelerator="cpu", devices=2, strategy="ddp")
fabric.launch()
fabric.seed_everything(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = fabric.setup(model, optimizer)
g = torch.Generator().manual_seed(1)
x = torch.randn(256, 8, generator=g)
y = x.sum(dim=1, keepdim=True)
loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
losses = []
for epoch in range(2):
    for xb, yb in tqdm(loader, disable=fabric.global_rank != 0, desc=f"epoch {epoch}"):
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        fabric.backward(loss)
        optimizer.step()
        losses.append(fabric.all_reduce(loss.detach(), reduce_op="mean").item())
if fabric.global_rank == 0:
    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode() + value.detach().contiguous().numpy().tobytes())
    with open(os.path.join(out, f"{name}.json"), "w") as fh:
        json.dump(
            {"sha256": digest.hexdigest(), "losses": losses, "world_size": fabric.world_size}, fh
        )
# A clean end, as torch asks: a rank that exits with its gloo threads still running can
# abort ("terminate called without an active exception"), under torchrun as well.
fabric.barrier()
torch.distributed.destroy_process_group()
