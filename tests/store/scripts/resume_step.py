"""The prepared objects of train.py: resume, and write the step this rank resumed from to OUT_DIR/rank-N.txt.

usage: resume_step.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import accel


def main(out: Path) -> None:
    acc = accel.Accelerator(seed=7)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    model, opt, sched, _ = acc.prepare(model, opt, sched, DataLoader(data, batch_size=4))
    step = acc.load_state()
    (out / f"rank-{acc.rank}.txt").write_text(str(step))
    acc.end()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
