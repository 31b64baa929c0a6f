"""A rank of a world someone else started, as Ray Train or ``mp.spawn`` start one: the
group is made with ``init_process_group(rank=, world_size=)`` and no torchrun variable
is set. ``joined_world.py RANK PORT OUT``: three steps from the latest checkpoint, saved;
what the rank saw written to OUT/rank<R>-<first step>.json."""

import json
import os
import sys

import torch
import torch.distributed as dist

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(name, None)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)

from accel import Accelerator  # noqa: E402 - after the group, as in a Ray worker

acc = Accelerator(cpu=True)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
resumed = acc.load_state()
start = resumed or 0
for step in range(start, start + 3):
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * 2 + rank))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    acc.backward(loss)
    opt.step()
acc.save_state(step=start + 3)
seen = {
    "rank": acc.rank,
    "world": acc.world_size,
    "main": acc.is_main_process,
    "resumed": resumed,
    "weights": [p.detach().tolist() for p in acc.unwrap_model(model).parameters()],
}
with open(os.path.join(out, f"rank{rank}-{start}.json"), "w") as fh:
    json.dump(seen, fh)
acc.end()
dist.destroy_process_group()  # the group is its starter's to end
