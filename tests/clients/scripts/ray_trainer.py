"""Ray Train's ``TorchTrainer`` on CPU with 2 workers, whose loop uses ``accel.Accelerator``.

``ray_trainer.py WORKSPACE OUT TAG STEPS``: Ray starts the workers and makes their process
group (gloo); the loop's ``Accelerator()`` joins it, resumes from accel's newest
checkpoint, trains STEPS more steps and saves. Each rank writes what it saw to
OUT/TAG-rank<R>.json. Ray's own results go under OUT/ray (nothing leaves the machine).
"""

import json
import os
import sys

import ray
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

workspace, out, tag, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def loop(config: dict) -> None:
    import torch
    import torch.distributed as dist

    from accel import Accelerator

    assert dist.is_initialized()  # Ray made the group before the loop runs
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    resumed = acc.load_state()
    start = resumed or 0
    for step in range(start, start + config["steps"]):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * 2 + acc.rank))
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        acc.backward(loss)
        opt.step()
    acc.save_state(step=start + config["steps"])
    seen = {
        "rank": acc.rank,
        "world": acc.world_size,
        "main": acc.is_main_process,
        "resumed": resumed,
        "group_rank": dist.get_rank(),
        "weights": [p.detach().tolist() for p in acc.unwrap_model(model).parameters()],
    }
    with open(os.path.join(config["out"], f"{config['tag']}-rank{acc.rank}.json"), "w") as fh:
        json.dump(seen, fh)
    acc.end()  # the group stays Ray's: it ends it


ray.init(
    num_cpus=4,
    include_dashboard=False,
    runtime_env={"env_vars": {"ACCEL_WORKSPACE": workspace, "OMP_NUM_THREADS": "1"}},
)
try:
    TorchTrainer(
        loop,
        train_loop_config={"out": out, "tag": tag, "steps": steps},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=os.path.join(out, "ray"), name=tag),
    ).fit()
finally:
    ray.shutdown()
