"""The job bench_recovery.py kills: 2 ranks, an MLP of about 21M parameters with Adam.

    python _recovery_train.py MODE OUT STEPS KILL_AT [WIDTH LAYERS]

MODE ``plain`` is a torchrun script as pytorch/examples writes one: DDP, ``torch.save``
of the model and optimizer every 10 steps (rank 0), ``torch.load`` on start. MODE
``accel`` is the same loop through ``accel.Accelerator`` (``load_state()`` on start;
checkpoints come from ``checkpoints.snapshot_every``, set by the benchmark). The batch
of step ``i`` depends on ``i`` and the rank only, so a resumed run trains on the same
data. In the first attempt rank 1 SIGKILLs itself as step ``KILL_AT`` begins, after
writing the time to ``OUT/kill``; after a restart rank 0 writes the time of its first
trained step to ``OUT/first`` and the step it resumed from to ``OUT/resumed``; at the end
rank 0 writes the final weights' bytes to ``OUT/weights``, and after a restart the times
it reached each phase to ``OUT/phases`` (JSON): the script's start, the process group,
the model built (the script's own ``net()``), wrapped (DDP, or ``prepare``), the state
loaded.
"""

from __future__ import annotations

import time

PHASES = {"start": time.time()}  # before torch is imported: a restart that execs pays it

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

mode, out = sys.argv[1], Path(sys.argv[2])
steps, kill_at = int(sys.argv[3]), int(sys.argv[4])
width = int(sys.argv[5]) if len(sys.argv) > 5 else 2048
layers = int(sys.argv[6]) if len(sys.argv) > 6 else 5
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
torch.set_num_threads(1)


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    parts: list[torch.nn.Module] = []
    for _ in range(layers):
        parts += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*parts)


def batch(step: int) -> torch.Tensor:
    return torch.randn(16, width, generator=torch.Generator().manual_seed(step * 2 + rank))


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, backward) -> None:
    opt.zero_grad()
    backward(model(batch(step)).pow(2).mean())
    opt.step()


def maybe_die(step: int) -> None:
    """Rank 1, first attempt: SIGKILLed as step ``kill_at`` (1-based) begins."""
    if attempt == 0 and rank == 1 and step + 1 == kill_at:
        (out / "kill").write_text(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)


def trained(step: int, resumed: int) -> None:
    """Rank 0, after a restart: the time its first step was trained."""
    if attempt > 0 and rank == 0 and step == resumed + 1 and not (out / "first").exists():
        (out / "first").write_text(repr(time.time()))
        (out / "resumed").write_text(str(resumed))
        (out / "phases").write_text(json.dumps(PHASES))


def finish(model: torch.nn.Module) -> None:
    if rank == 0:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        (out / "weights").write_bytes(flat.numpy().tobytes())


def plain() -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    PHASES["group"] = time.time()
    base = net()
    PHASES["built"] = time.time()
    model = DistributedDataParallel(base)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    PHASES["model"] = time.time()
    path, step = out / "plain.pt", 0
    if path.exists():
        saved = torch.load(path, weights_only=True)
        model.module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        step = int(saved["step"])
    PHASES["loaded"] = time.time()
    resumed = step
    while step < steps:
        maybe_die(step)
        train(model, opt, step, lambda loss: loss.backward())
        step += 1
        trained(step, resumed)
        if step % 10 == 0:
            if rank == 0:
                state = {"model": model.module.state_dict(), "optim": opt.state_dict()}
                torch.save({**state, "step": step}, str(path) + ".tmp")
                os.replace(str(path) + ".tmp", path)
            dist.barrier()
    finish(model.module)
    dist.destroy_process_group()


def with_accel() -> None:
    from accel import Accelerator

    acc = Accelerator(cpu=True, seed=0)
    PHASES["group"] = time.time()
    base = net()
    PHASES["built"] = time.time()
    model, opt = acc.prepare(base, torch.optim.Adam(base.parameters(), lr=1e-4))
    PHASES["model"] = time.time()
    step = acc.load_state() or 0
    PHASES["loaded"] = time.time()
    resumed = step
    while step < steps:
        maybe_die(step)
        train(model, opt, step, acc.backward)
        step += 1
        trained(step, resumed)
    finish(acc.unwrap_model(model))
    acc.end()


if __name__ == "__main__":
    plain() if mode == "plain" else with_accel()
