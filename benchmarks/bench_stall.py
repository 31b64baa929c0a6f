"""What checkpointing costs a training loop's critical path, in one run.

    python benchmarks/bench_stall.py [--quick] [--steps 10] [--rounds 6] [--width 2048]
        [--layers 5] [--batch 16] [--dir PATH]

Two ranks on the CPU (gloo, one intra-op thread each), ``accel.Accelerator`` with DDP,
a ``--layers``-deep MLP of ``--width`` (5 x 2048: about 21M parameters) with Adam. Each
mode trains ``--steps`` steps per round, the modes in turn (reversed every other round):

- no checkpoint (the baseline);
- a memory snapshot every step and every 10 steps: accel's memory tier
  (``checkpoints.snapshot_every``): the Accelerator's snapshot, what only the optimizer
  changes copied in a background thread and fenced by the next optimizer step, then
  written into the run's folder in /dev/shm (``accel.store.memtier``, as under accel
  launch, not persisted); and every step in a loop that steps an LR scheduler after the
  optimizer (the snapshot is whole at the next forward, not at the step);
- ``save_state(step, async_save=True)`` every step (each one written to disk) and every
  10 steps: the overlapped snapshot, then the write in the background;
- ``save_state(step, async_save=False)`` every 10 steps: the sync save;
- today's async save every 10 steps: the same call with every tensor copied before it
  returns (the blocking copy accel did before overlapped snapshots);
- ``torch.distributed.checkpoint.async_save`` every 10 steps, on a gloo group of its own;

and, between modes, a bare memcpy of rank 0's state (model and Adam's moments, into
buffers already touched, 8 MiB ``numpy.copyto`` pieces on every core).

A save comes at the middle step of every 10 (at every step), after an untimed barrier:
the arrival check of ``save_state`` would otherwise count one rank's lag behind the
other (the next all-reduce absorbs it anyway). A memory snapshot has no arrival check
and takes no barrier (it is inside the step time, which a barrier every step would
raise by itself). Blocked time per save: the save call
plus the wait of the next optimizer step's fence (the snapshot's copy not yet done),
rank 0 (the rank that writes). Step time: rank 0's mean over a mode's steps, saves
included, plus the time its last save takes to finish after the last step. CPU time:
both ranks' process time (every thread) per step, which a busy shared machine does
not blur as it blurs wall time.
Goals (issue 27): blocked time per overlapped save <= 0.10 x memcpy; step-time overhead
of a memory snapshot every 10 steps <= 3 % (the overhead of an overlapped save_state
every 10 steps, which also writes the state to disk, is printed beside it); of a
memory snapshot every step <= 1.2 x memcpy / step time; DCP's async_save beaten on
blocked time. Exits 1 when a goal is missed. ``--quick`` (6 steps, one round) runs in under two minutes
on two idle cores; its numbers are a smoke test, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _timing import memcpy_times, p90

MiB = 1 << 20
EVERY = 10
MODES = [
    "no checkpoint",
    "memory snapshot every step",
    "memory snapshot every 10",
    "memory snapshot every step, LR scheduler",
    "save_state overlapped every step",
    "save_state overlapped every 10",
    "save_state sync every 10",
    "save_state blocking copy every 10",
    "DCP async_save every 10",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the savers: each returns the seconds its call blocked ------------------------------


class MemoryTier:
    """accel's memory tier (``checkpoints.snapshot_every: 1``): the Accelerator's
    ``Snapshots`` writing into the run's shared-memory folder, as under accel launch.

    The optimizer's hooks are not installed (the modes switch at run time): the call
    after ``opt.step()`` is the post-hook's, and the next call (or ``finish``) ends the
    iteration, as the next step's pre-hook does; the copy is fenced by ``fence_all``.
    """

    def __init__(self, acc: Any) -> None:
        from accel.accelerator._snapshots import Snapshots

        self.snaps = Snapshots(acc, 1, None)

    def __call__(self, step: int) -> None:
        self.snaps.close()
        self.snaps.count = step - 1
        self.snaps.after_step()

    def finish(self) -> None:
        self.snaps.settle()


class WithScheduler:
    """The memory tier in a loop that steps an LR scheduler after the optimizer: the
    Accelerator holds it while the mode runs (``train_step`` steps it)."""

    def __init__(self, acc: Any, tier: MemoryTier, scheduler: Any) -> None:
        self.acc, self.tier, self.scheduler = acc, tier, scheduler

    def __call__(self, step: int) -> None:
        self.acc._schedulers = [self.scheduler]
        self.tier(step)

    def finish(self) -> None:
        self.tier.finish()
        self.acc._schedulers = []


class SaveState:
    def __init__(self, acc: Any, *, overlap: bool, async_save: bool) -> None:
        self.acc, self.overlap, self.async_save = acc, overlap, async_save

    def __call__(self, step: int) -> None:
        from accel.store import async_save

        if self.overlap:
            self.acc.save_state(step, async_save=self.async_save)
            return
        # Today's async save before overlapped snapshots: every tensor copied now.
        chosen = async_save.outside_optimizers
        async_save.outside_optimizers = lambda _: lambda _t: True  # type: ignore[assignment]
        try:
            self.acc.save_state(step, async_save=True)
        finally:
            async_save.outside_optimizers = chosen  # type: ignore[assignment]

    def finish(self) -> None:
        self.acc.checkpoints.wait()


class DcpAsync:
    def __init__(self, acc: Any, opt: Any, folder: Path) -> None:
        import torch.distributed as dist

        self.acc, self.opt, self.folder = acc, opt, folder
        self.group = dist.new_group(backend="gloo")  # DCP's advice: not training's group
        self.future: Any = None

    def __call__(self, step: int) -> None:
        from torch.distributed.checkpoint.state_dict_saver import async_save

        self.finish()
        model = self.acc.unwrap_model(self.acc._models[0])
        state = {"model": model.state_dict(), "optim": self.opt.state_dict()}
        self.future = async_save(
            state, checkpoint_id=str(self.folder / f"dcp-{step}"), process_group=self.group
        )

    def finish(self) -> None:
        if self.future is not None:
            self.future.result()
            self.future = None


class NoSave:
    def __call__(self, step: int) -> None:
        raise AssertionError("never called")

    def finish(self) -> None:
        pass


# -- one rank ---------------------------------------------------------------------------


def _rank(rank: int, port: int, args: argparse.Namespace, out: str) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from accel import Accelerator, Workspace

    acc = Accelerator(workspace=Workspace(Path(args.dir) / ".accelerate"), cpu=True, seed=0)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers)
    model, opt = acc.prepare(net, torch.optim.Adam(net.parameters(), lr=1e-4))
    x = torch.randn(args.batch, args.width)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)  # the same rate
    tier = MemoryTier(acc)  # one tier, one writer per rank: the modes take turns

    def train_step(scheduled: bool = False) -> float:
        from accel.store.async_save import fence_all

        opt.zero_grad()
        loss = model(x).pow(2).mean()
        acc.backward(loss)
        start = time.perf_counter()
        fence_all()  # what the optimizer's step pre-hook would wait for, timed here
        waited = time.perf_counter() - start
        if scheduled:
            tier.snaps.close()  # the iteration's end: the Accelerator's step pre-hook
        opt.step()
        if scheduled:
            scheduler.step()
        return waited

    savers: dict[str, Any] = {
        "no checkpoint": NoSave(),
        "memory snapshot every step": tier,
        "memory snapshot every 10": tier,
        "memory snapshot every step, LR scheduler": WithScheduler(acc, tier, scheduler),
        "save_state overlapped every step": SaveState(acc, overlap=True, async_save=True),
        "save_state overlapped every 10": SaveState(acc, overlap=True, async_save=True),
        "save_state sync every 10": SaveState(acc, overlap=True, async_save=False),
        "save_state blocking copy every 10": SaveState(acc, overlap=False, async_save=True),
        "DCP async_save every 10": DcpAsync(acc, opt, Path(args.dir) / "dcp"),
    }
    step_counter = [0]
    results: dict[str, dict[str, list[float]]] = {
        m: {"blocked": [], "step": [], "drain": [], "cpu": []} for m in MODES
    }
    memcpy: list[float] = []
    for _ in range(2):  # warm-up: Adam's state, the snapshot buffers, DCP's planner
        train_step()
    for saver in {id(s): s for s in savers.values()}.values():
        if not isinstance(saver, NoSave):
            step_counter[0] += 1
            saver(step_counter[0])
            train_step()
            saver.finish()
    for round_ in range(args.rounds):
        order = MODES if round_ % 2 == 0 else MODES[::-1]
        for mode in order:
            step = (lambda: train_step(True)) if "scheduler" in mode else train_step
            _run_mode(acc, mode, savers[mode], step, args.steps, step_counter, results)
        acc.wait_for_everyone()
        if rank == 0:
            memcpy += memcpy_times(_state_tensors(model, opt), 5)
        acc.wait_for_everyone()
    state_bytes = sum(t.numel() * t.element_size() for t in _state_tensors(model, opt))
    Path(f"{out}.{rank}").write_text(
        json.dumps({"results": results, "memcpy": memcpy, "bytes": state_bytes})
    )
    acc.end()


def _run_mode(
    acc: Any,
    mode: str,
    saver: Any,
    train_step: Callable[[], float],
    steps: int,
    counter: list[int],
    results: dict[str, dict[str, list[float]]],
) -> None:
    every = 0 if mode == "no checkpoint" else 1 if "every step" in mode else EVERY
    acc.wait_for_everyone()
    record = results[mode]
    pending = None  # the blocked time of the last save, until its fence is known
    cpu = time.process_time()
    for i in range(steps):
        start = time.perf_counter()
        waited = train_step()
        if pending is not None:
            record["blocked"].append(pending + waited)
            pending = None
        if every and i % every == every // 2:
            counter[0] += 1
            # Untimed: the ranks meet first, so that a save's arrival check does not
            # count one rank's lag behind the other as the save's own time. A memory
            # snapshot meets nobody: no barrier, which every step cost it 7 to 15 % of a
            # step on two busy cores (a loop that snapshots has none).
            if not mode.startswith("memory snapshot"):
                acc.wait_for_everyone()
            t0 = time.perf_counter()
            saver(counter[0])
            pending = time.perf_counter() - t0
        record["step"].append(time.perf_counter() - start)
    start = time.perf_counter()
    saver.finish()
    if pending is not None:
        record["blocked"].append(pending)
    record["drain"].append(time.perf_counter() - start)
    record["cpu"].append(time.process_time() - cpu)


def _state_tensors(model: Any, opt: Any) -> list[Any]:
    import torch

    moments = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return [p.detach() for p in model.parameters()] + moments


# -- the report -------------------------------------------------------------------------


def _report(ranks: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """Blocked and step times of rank 0 (the rank that writes); CPU time of both."""
    data = ranks[0]
    results, memcpy = data["results"], statistics.median(data["memcpy"])

    def cpu_time(mode: str) -> float:
        total = sum(sum(r["results"][mode]["cpu"]) for r in ranks)
        return total / len(results[mode]["step"])

    def step_time(mode: str) -> float:
        r = results[mode]
        return float(sum(r["step"]) + sum(r["drain"])) / len(r["step"])

    base = step_time("no checkpoint")
    print(
        f"\n2 ranks, {args.layers} x Linear({args.width}) + Adam, batch {args.batch}, "
        f"{args.steps} steps x {args.rounds} rounds per mode; rank 0's state "
        f"{data['bytes'] / MiB:.0f} MiB; memcpy of it: median {memcpy * 1000:.1f} ms"
    )
    print(
        f"{'mode':<42}{'blocked/save median':>20}{'p90':>9}{'step mean':>11}{'overhead':>10}"
        f"{'CPU s/step':>12}{'CPU overhead':>14}"
    )
    for mode in MODES:
        blocked = results[mode]["blocked"]
        shown = f"{statistics.median(blocked) * 1000:14.1f} ms" if blocked else " " * 17
        tail = f"{p90(blocked) * 1000:6.1f} ms" if blocked else " " * 9
        overhead = step_time(mode) / base - 1
        cpu = cpu_time(mode)
        print(
            f"{mode:<42}{shown:>20}{tail:>9}{step_time(mode) * 1000:8.0f} ms{overhead:9.1%}"
            f"{cpu:12.3f}{cpu / cpu_time('no checkpoint') - 1:13.1%}"
        )

    overlapped = statistics.median(results["save_state overlapped every 10"]["blocked"])
    dcp = statistics.median(results["DCP async_save every 10"]["blocked"])
    every_step = step_time("memory snapshot every step") / base - 1
    goals = [
        ("blocked per overlapped save / memcpy", overlapped / memcpy, 0.10),
        (
            "step overhead, memory snapshot every 10",
            step_time("memory snapshot every 10") / base - 1,
            0.03,
        ),
        ("step overhead, memory snapshot every step", every_step, 1.2 * memcpy / base),
        ("blocked overlapped / DCP async_save", overlapped / dcp, 1.0),
    ]
    # Beside the goal, not instead of it: each of these saves also hashes and writes the
    # whole state to disk, on the cores training uses.
    disk = step_time("save_state overlapped every 10") / base - 1
    print(f"\nstep overhead, overlapped save_state every 10 (written to disk): {disk:.3f}")
    scheduled = step_time("memory snapshot every step, LR scheduler") / base - 1
    print(f"step overhead, memory snapshot every step with an LR scheduler: {scheduled:.3f}")
    print("\ngoals")
    ok = True
    for name, value, goal in goals:
        met = value <= goal if "DCP" not in name else value < goal
        ok &= met
        print(
            f"  {name:<44} {value:7.3f}   goal {'<' if 'DCP' in name else '<='} {goal:.3f}  {'ok' if met else 'MISSED'}"
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds = 6, 1
    from torch.multiprocessing.spawn import spawn

    from accel import Workspace
    from accel.store import memtier

    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        args.dir = folder
        Workspace(Path(folder) / ".accelerate").ensure()
        out = str(Path(folder) / "result.json")
        tier = memtier.make_tier(f"bench-stall-{os.getpid()}")  # as accel launch makes it
        os.environ[memtier.DIR_ENV] = str(tier)
        try:
            spawn(_rank, args=(_free_port(), args, out), nprocs=2, join=True)  # type: ignore[no-untyped-call]
        finally:
            memtier.remove_tier(tier)
        data = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    return 0 if _report(data, args) else 1


if __name__ == "__main__":
    sys.exit(main())
