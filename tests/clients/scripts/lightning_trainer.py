"""PyTorch Lightning's ``Trainer`` with DDP on CPU: a small MLP, two epochs, a checkpoint.

argv: OUT NAME. Rank 0 writes OUT/NAME.json: the final weights' sha256, the losses each
step logged, the world size, the cluster environment Lightning detected and the files of
the checkpoint its ``ModelCheckpoint`` saved (under OUT/NAME-ckpt).
"""

import hashlib
import json
import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

out, name = sys.argv[1], sys.argv[2]


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
        )
        self.losses: list[float] = []

    def training_step(self, batch, index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, sync_dist=True)
        self.losses.append(self.all_gather(loss.detach()).mean().item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


L.seed_everything(0)
g = torch.Generator().manual_seed(1)
x = torch.randn(256, 8, generator=g)
data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16, shuffle=True)
model = Regression()
checkpoints = os.path.join(out, f"{name}-ckpt")
trainer = L.Trainer(
    accelerator="cpu",
    devices=2,
    strategy="ddp",
    max_epochs=2,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=checkpoints)],
)
trainer.fit(model, data)
if trainer.global_rank == 0:
    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode() + value.detach().contiguous().numpy().tobytes())
    result = {
        "sha256": digest.hexdigest(),
        "losses": model.losses,
        "world_size": trainer.world_size,
        "environment": type(trainer.strategy.cluster_environment).__name__,
        "checkpoints": sorted(os.listdir(checkpoints)),
    }
    with open(os.path.join(out, f"{name}.json"), "w") as fh:
        json.dump(result, fh)
