"""One SGD step of a linear model on torch_xla's device (``PJRT_DEVICE=CPU``), and the
same step in plain torch on the CPU; with more than one worker, the ``xla`` process
group through ``init_method="xla://"``. Writes ``OUT/rank-N.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # registers "xla" and init_method="xla://"
import torch_xla.runtime as xr


def one_step(device: torch.device) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.arange(32, dtype=torch.float32).reshape(8, 4).to(device) / 32
    model(x).pow(2).mean().backward()
    if device.type == "xla":
        xm.optimizer_step(opt)
        torch_xla.sync()
    else:
        opt.step()
    return [float(v) for v in model.weight.detach().cpu().flatten()]


def main() -> None:
    found: dict[str, object] = {"env": [os.environ["RANK"], os.environ["WORLD_SIZE"]]}
    if int(os.environ["WORLD_SIZE"]) > 1:
        dist.init_process_group("xla", init_method="xla://")
        t = torch.ones(1, device=torch_xla.device())
        dist.all_reduce(t)
        found["xla_group"] = [dist.get_rank(), dist.get_world_size(), float(t.item())]
        dist.destroy_process_group()
    found["device"] = str(torch_xla.device())
    found["xla_world"] = xr.world_size()
    found["xla"] = one_step(torch_xla.device())
    found["cpu"] = one_step(torch.device("cpu"))
    Path(sys.argv[1], f"rank-{os.environ['RANK']}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main()
