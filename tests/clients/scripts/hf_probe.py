"""The same calls on Hugging Face Accelerate's ``Accelerator`` and on accel's.

``probe(Accelerator, folder)`` runs every row of :data:`ROWS` with a fresh accelerator
made by the class given and returns ``{row: result}``, each result plain JSON (tensors
as ``[dtype, values]``) or ``"error: <Type>"``. Run as a script under a launcher
(``python hf_probe.py hf|accel OUT_DIR``) it writes ``OUT_DIR/<which>-rank<N>.json``:
the 2-rank comparison of tests/clients/test_hf_api_probe.py.

Every row calls the same public API with the same arguments on both facades; nothing in
a row knows which facade it runs on.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

Make = Callable[..., Any]


def plain(value: Any) -> Any:
    """JSON of ``value``: tensors as [dtype, nested list], containers recursively."""
    if isinstance(value, torch.Tensor):
        return [str(value.dtype).replace("torch.", ""), value.tolist()]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, torch.device):
        return str(value)
    return type(value).__name__


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def dataset(n: int = 10) -> TensorDataset:
    return TensorDataset(torch.arange(n * 2.0).reshape(n, 2), torch.arange(float(n)))


def model_opt(lr: float = 0.1) -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    return model, torch.optim.SGD(model.parameters(), lr=lr)


def first_rows(loader: Any) -> list[Any]:
    return [batch[1].tolist() for batch in loader]


# -- the rows --------------------------------------------------------------------------


def attributes(make: Make, folder: Path) -> Any:
    acc = make()
    names = [
        "num_processes", "process_index", "local_process_index", "is_main_process",
        "is_local_main_process", "is_last_process", "use_distributed", "sync_gradients",
        "step", "gradient_accumulation_steps", "optimizer_step_was_skipped", "split_batches",
        "even_batches", "mixed_precision", "project_dir", "logging_dir", "save_iteration",
    ]  # fmt: skip
    out = {name: plain(getattr(acc, name)) for name in names}
    out["distributed_type"] = str(acc.distributed_type.value)
    out["device"] = acc.device.type
    out["trackers"] = len(acc.trackers)
    state = acc.state
    out["state"] = [state.num_processes, state.process_index, str(state.distributed_type.value)]
    return out


def gather(make: Make, folder: Path) -> Any:
    acc = make()
    t = torch.tensor([rank(), rank() + 10])
    return {
        "1d": acc.gather(t),
        "0d": acc.gather(torch.tensor(rank() * 1.5)),
        "2d": acc.gather(torch.full((2, 2), rank())),
        "nested": acc.gather({"a": t, "b": (t * 2, [t * 3])}),
    }


def reduce(make: Make, folder: Path) -> Any:
    acc = make()
    t = torch.tensor([1.0 + rank(), 4.0 * (rank() + 1)])
    return {r: acc.reduce(t, reduction=r) for r in ("sum", "mean", "max")} | {
        "default": acc.reduce(t),
        "nested": acc.reduce({"x": t}),
    }


def pad(make: Make, folder: Path) -> Any:
    acc = make()
    t = torch.ones(rank() + 1, 2)
    return {
        "last": acc.pad_across_processes(t),
        "first": acc.pad_across_processes(t, pad_index=-1, pad_first=True),
        "dim1": acc.pad_across_processes(torch.ones(2, rank() + 1), dim=1),
        "out_of_range": acc.pad_across_processes(t, dim=5),
    }


def split(make: Make, folder: Path) -> Any:
    acc = make()
    out = {}
    for name, inputs, padding in (
        ("list", list(range(5)), False),
        ("padded", list(range(5)), True),
        ("tensor", torch.arange(7), False),
        ("tensor_padded", torch.arange(7), True),
        ("dict", {"a": [1, 2, 3], "b": ["x", "y", "z"]}, False),
    ):
        with acc.split_between_processes(inputs, apply_padding=padding) as part:
            out[name] = plain(part)
    return out


def gather_for_metrics(make: Make, folder: Path) -> Any:
    acc = make()
    loader = acc.prepare(DataLoader(dataset(9), batch_size=2))
    seen = [acc.gather_for_metrics(y) for _, y in loader]
    objects = acc.gather_for_metrics([f"r{rank()}"])
    return {"batches": seen, "objects": objects}


def ordering(make: Make, folder: Path) -> Any:
    acc = make()
    order = []
    with acc.main_process_first():
        order.append("main_first")
    with acc.local_main_process_first():
        order.append("local_main_first")
    acc.wait_for_everyone()
    return order


def decorators(make: Make, folder: Path) -> Any:
    acc = make()

    def value() -> str:
        return f"ran on {rank()}"

    return {
        "main": acc.on_main_process(value)(),
        "local_main": acc.on_local_main_process(value)(),
        "last": acc.on_last_process(value)(),
        "process_1": acc.on_process(value, process_index=1)(),
        "local_process_0": acc.on_local_process(value, local_process_index=0)(),
    }


def sharding(make: Make, folder: Path) -> Any:
    acc = make()
    plain_loader = acc.prepare(DataLoader(dataset(10), batch_size=2))
    dropping = acc.prepare(DataLoader(dataset(10), batch_size=3, drop_last=True))
    uneven = acc.prepare(DataLoader(dataset(7), batch_size=2))
    torch.manual_seed(1)
    shuffled = acc.prepare(DataLoader(dataset(12), batch_size=2, shuffle=True))
    return {
        "plain": first_rows(plain_loader),
        "len": len(plain_loader),
        "drop_last": first_rows(dropping),
        "uneven": first_rows(uneven),
        "shuffled_epoch0": first_rows(shuffled),
        "shuffled_epoch1": first_rows(shuffled),
    }


def split_batches(make: Make, folder: Path, config: Any) -> Any:
    # Accelerate 1.x ignores the constructor's split_batches: dataloader_config decides
    ignored = make(split_batches=True).prepare(DataLoader(dataset(10), batch_size=4))
    acc = make(dataloader_config=config(split_batches=True))
    loader = acc.prepare(DataLoader(dataset(10), batch_size=4))
    return {"argument": first_rows(ignored), "config": first_rows(loader)}


def even_batches_off(make: Make, folder: Path, config: Any) -> Any:
    acc = make(dataloader_config=config(even_batches=False))
    return first_rows(acc.prepare(DataLoader(dataset(7), batch_size=2)))


def skip_first_batches(make: Make, folder: Path) -> Any:
    acc = make()
    loader = acc.prepare(DataLoader(dataset(12), batch_size=2))
    return {
        "skipped": first_rows(acc.skip_first_batches(loader, 1)),
        "plain_loader": first_rows(acc.skip_first_batches(DataLoader(dataset(4)), 2)),
    }


def accumulate(make: Make, folder: Path) -> Any:
    acc = make(gradient_accumulation_steps=2)
    model, opt = model_opt(lr=0.001)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    loader = DataLoader(dataset(12), batch_size=2)
    model, opt, sched, loader = acc.prepare(model, opt, sched, loader)
    syncs, lrs = [], []
    for x, y in loader:
        with acc.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
            acc.backward(loss)
            syncs.append(acc.sync_gradients)
            opt.step()
            sched.step()
            opt.zero_grad()
            lrs.append(sched.get_last_lr()[0])
    weights = acc.unwrap_model(model).state_dict()
    return {"syncs": syncs, "lrs": lrs, "weights": weights, "step": acc.step}


def accumulate_uneven(make: Make, folder: Path) -> Any:
    """The loader's end closes a cycle: 5 batches, 2 steps a cycle."""
    acc = make(gradient_accumulation_steps=2)
    model, opt = model_opt(lr=0.001)
    model, opt, loader = acc.prepare(model, opt, DataLoader(dataset(10), batch_size=2))
    syncs = []
    for _ in range(2):
        for x, y in loader:
            with acc.accumulate(model):
                acc.backward(torch.nn.functional.mse_loss(model(x).squeeze(-1), y))
                syncs.append(acc.sync_gradients)
                opt.step()
                opt.zero_grad()
    return {"syncs": syncs, "weights": acc.get_state_dict(model)}


def mixed_precision(make: Make, folder: Path) -> Any:
    acc = make(mixed_precision="bf16")
    model, opt = model_opt()
    model, opt = acc.prepare(model, opt)
    x = torch.arange(4.0).reshape(2, 2) / 3 + rank()
    out = model(x)  # Accelerate autocasts a prepared model's forward itself
    acc.backward(out.pow(2).sum())
    opt.step()
    with acc.autocast():
        inner = torch.nn.functional.linear(x, torch.ones(1, 2))
    return {"out": out, "inner_dtype": str(inner.dtype), "weights": acc.get_state_dict(model)}


def handlers(make: Make, folder: Path, types: dict[str, Any]) -> Any:
    ddp = types["DistributedDataParallelKwargs"](find_unused_parameters=True)
    acc = make(kwargs_handlers=[ddp])
    model, opt = model_opt()
    model, opt = acc.prepare(model, opt)
    acc.backward(model(torch.ones(2, 2) * (rank() + 1)).sum())
    opt.step()
    found = getattr(model, "find_unused_parameters", None)
    return {"find_unused": found, "weights": acc.get_state_dict(model)}


def triggers_and_options(make: Make, folder: Path, config: Any) -> Any:
    acc = make(dataloader_config=config(use_seedable_sampler=True, data_seed=3))
    before = acc.check_trigger()
    if acc.is_last_process:
        acc.set_trigger()
    after, again = acc.check_trigger(), acc.check_trigger()
    options = [acc.use_seedable_sampler, acc.non_blocking, acc.even_batches]
    acc.even_batches = False
    loader = acc.prepare(DataLoader(dataset(7), batch_size=2, shuffle=True))
    return {
        "triggers": [before, after, again],
        "options": [*options, acc.even_batches],
        "seedable_epochs": [first_rows(loader), first_rows(loader)],
    }


def uneven_and_parallelism(make: Make, folder: Path) -> Any:
    acc = make()
    model, opt = model_opt(lr=0.01)
    model, opt, loader = acc.prepare(model, opt, DataLoader(dataset(9), batch_size=2))
    batches = 0
    with acc.join_uneven_inputs([model], even_batches=False):
        for x, _ in loader:  # Accelerate overrides even_batches on GPU ranks only
            acc.backward(model(x).sum())
            opt.step()
            opt.zero_grad()
            batches += 1
    raises = {}
    for name in (
        "tensor_parallel_rank", "pipeline_parallel_rank", "context_parallel_rank",
        "data_parallel_rank", "data_parallel_shard_rank",
    ):  # fmt: skip
        try:
            getattr(acc, name)
            raises[name] = False
        except Exception:  # noqa: BLE001 - Accelerate raises RuntimeError or NotImplementedError
            raises[name] = True
    with acc.maybe_context_parallel():
        pass
    names = (
        "is_fsdp2", "is_composable_parallelism_enabled", "should_save_model", "dispatch_batches",
        "use_stateful_dataloader", "deepspeed_plugin", "parallelism_config", "torch_device_mesh",
        "multi_device",
    )  # fmt: skip
    return {
        "batches": batches,
        "after": first_rows(loader),
        "weights": acc.get_state_dict(model),
        "raises": raises,
        "values": [getattr(acc, name) for name in names] + [acc.verify_device_map(model)],
    }


def log_without_trackers(make: Make, folder: Path) -> Any:
    acc = make()
    return [acc.log({"loss": 1.0}), acc.log({"loss": 2.0}, step=3), acc.trackers]


def scheduler(make: Make, folder: Path) -> Any:
    acc = make()
    model, opt = model_opt()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    model, opt, sched = acc.prepare(model, opt, sched)
    lrs = []
    for _ in range(3):
        acc.backward(model(torch.ones(1, 2)).sum())
        opt.step()
        sched.step()
        opt.zero_grad()
        lrs.append(round(sched.get_last_lr()[0], 6))
    return lrs


def training_step(make: Make, folder: Path) -> Any:
    acc = make()
    model, opt = model_opt()
    model, opt = acc.prepare(model, opt)
    x = torch.arange(4.0).reshape(2, 2) + rank()
    acc.backward(model(x).pow(2).sum())
    norm = acc.clip_grad_norm_(model.parameters(), 0.5)
    acc.clip_grad_value_(model.parameters(), 0.1)
    acc.unscale_gradients()
    opt.step()
    with acc.autocast():
        out = model(x)
    with acc.no_sync(model):
        pass
    return {
        "norm": round(float(norm), 5),
        "weights": acc.get_state_dict(model),
        "unwrapped": type(acc.unwrap_model(model)).__name__,
        "autocast_out": out,
        "skipped": acc.optimizer_step_was_skipped,
    }


def save_model(make: Make, folder: Path) -> Any:
    from safetensors.torch import load_file

    acc = make()
    model, _ = model_opt()
    model = acc.prepare(model)
    target = folder / "save_model"
    acc.save_model(model, target)
    acc.save({"answer": torch.tensor([42])}, folder / "obj.pt")
    acc.wait_for_everyone()
    return {
        "files": sorted(p.name for p in target.iterdir()),
        "weights": load_file(target / "model.safetensors"),
        "obj": torch.load(folder / "obj.pt", weights_only=True),
    }


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def state_dict(self) -> dict[str, int]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.count = state["count"]


def save_load_state(make: Make, folder: Path) -> Any:
    acc = make()
    model, opt = model_opt()
    counter = Counter()
    model, opt = acc.prepare(model, opt)
    acc.register_for_checkpointing(counter)
    calls: list[Any] = []
    handle = acc.register_save_state_pre_hook(
        lambda models, weights, out: calls.append(["save", len(models), len(weights)])
    )
    acc.register_load_state_pre_hook(lambda models, out: calls.append(["load", len(models)]))
    counter.count = 7
    target = folder / "state" / "epoch_1"
    acc.save_state(str(target))
    acc.wait_for_everyone()  # Accelerate's save has no barrier: rank 1 could read a torn file
    handle.remove()
    saved = {k: v.clone() for k, v in acc.get_state_dict(model).items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    counter.count = 0
    acc.load_state(str(target))
    restored = acc.get_state_dict(model)
    return {
        "folder_exists": target.is_dir(),
        "weights_restored": all(torch.equal(saved[k], restored[k]) for k in saved),
        "counter": counter.count,
        "calls": calls,
        "save_iteration": acc.save_iteration,
    }


def automatic_naming(make: Make, folder: Path, project_config: Any) -> Any:
    config = project_config(
        project_dir=str(folder / "project"), automatic_checkpoint_naming=True, total_limit=2
    )
    acc = make(project_config=config)
    model, opt = model_opt()
    acc.prepare(model, opt)
    for _ in range(3):
        acc.save_state()
    acc.wait_for_everyone()
    acc.load_state()
    names = sorted(p.name for p in (folder / "project" / "checkpoints").iterdir())
    return {"folders": names, "iteration": acc.save_iteration}


def trackers(make: Make, folder: Path) -> Any:
    acc = make(log_with="tensorboard", project_dir=str(folder / "tb"))
    acc.init_trackers("probe", config={"lr": 0.1, "epochs": 2})
    acc.log({"loss": 0.5, "acc": 1}, step=1)
    tracker = acc.get_tracker("tensorboard")
    tracker.log({"direct": 1.0}, step=2)  # off the main process: a blank tracker
    names = [t.name for t in acc.trackers]
    acc.end_training()  # Accelerate ends the process group here: the last row
    run = folder / "tb" / "probe"  # written by the main process, read there (no barrier)
    events = sorted(p.name.split(".")[0] for p in run.glob("events.out.tfevents.*"))
    events = events if rank() == 0 else None
    return {"names": names, "tracker": getattr(tracker, "name", None), "events": events}


def profile(make: Make, folder: Path) -> Any:
    acc = make()
    with acc.profile() as prof:
        torch.ones(3).sum()
    return type(prof).__name__


def free_memory(make: Make, folder: Path) -> Any:
    acc = make()
    model, opt = model_opt()
    model, opt = acc.prepare(model, opt)
    model, opt = acc.free_memory(model, opt)
    again = acc.clear()
    return {"released": [model, opt], "again": again, "step": acc.step}


def printing(make: Make, folder: Path) -> Any:
    acc = make()
    acc.print("probe")  # main process only
    return "ok"


def rows(config_types: dict[str, Any]) -> dict[str, Callable[[Make, Path], Any]]:
    dl_config = config_types["DataLoaderConfiguration"]
    project_config = config_types["ProjectConfiguration"]
    return {
        "attributes": attributes,
        "gather": gather,
        "reduce": reduce,
        "pad_across_processes": pad,
        "split_between_processes": split,
        "gather_for_metrics": gather_for_metrics,
        "main_process_first": ordering,
        "on_process_decorators": decorators,
        "sharding": sharding,
        "split_batches": lambda m, f: split_batches(m, f, dl_config),
        "even_batches_off": lambda m, f: even_batches_off(m, f, dl_config),
        "skip_first_batches": skip_first_batches,
        "accumulate": accumulate,
        "accumulate_uneven": accumulate_uneven,
        "mixed_precision_bf16": mixed_precision,
        "kwargs_handlers_ddp": lambda m, f: handlers(m, f, config_types),
        "log_without_trackers": log_without_trackers,
        "join_uneven_inputs_parallelism": uneven_and_parallelism,
        "triggers_seedable_sampler": lambda m, f: triggers_and_options(m, f, dl_config),
        "scheduler": scheduler,
        "training_step": training_step,
        "save_model_and_save": save_model,
        "save_state_load_state": save_load_state,
        "automatic_checkpoint_naming": lambda m, f: automatic_naming(m, f, project_config),
        "profile": profile,
        "free_memory_clear": free_memory,
        "print": printing,
        "trackers_tensorboard": trackers,
    }


def probe(make: Make, folder: Path, config_types: dict[str, Any]) -> dict[str, Any]:
    """Every row's result (``error: <Type>: <message>`` for a row that raised)."""
    out: dict[str, Any] = {}
    for name, row in rows(config_types).items():
        where = folder / name
        where.mkdir(parents=True, exist_ok=True)
        try:
            out[name] = plain(row(make, where))
        except Exception as exc:  # noqa: BLE001 - a row that fails is a result to compare
            out[name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    return out


def hf_factory() -> tuple[Make, dict[str, Any]]:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration

    def make(**kwargs: Any) -> Any:
        AcceleratorState._reset_state(reset_partial_state=False)
        GradientState._reset_state()
        return Accelerator(cpu=True, **kwargs)

    from accelerate.utils import DistributedDataParallelKwargs

    return make, {
        "DataLoaderConfiguration": DataLoaderConfiguration,
        "ProjectConfiguration": ProjectConfiguration,
        "DistributedDataParallelKwargs": DistributedDataParallelKwargs,
    }


class DistributedDataParallelKwargs:
    """Accelerate's handler as accel reads it (by name and ``to_kwargs()``), for
    machines without Accelerate; a ported script passes Accelerate's own."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def to_kwargs(self) -> dict[str, Any]:
        return self.options


def accel_factory() -> tuple[Make, dict[str, Any]]:
    """accel's Accelerator, given what a ported script imports from accelerate.utils
    (when Accelerate is installed; accel's own stand-ins otherwise)."""
    from accel import Accelerator, DataLoaderConfiguration, ProjectConfiguration

    def make(**kwargs: Any) -> Any:
        return Accelerator(cpu=True, **kwargs)

    types: dict[str, Any] = {
        "DataLoaderConfiguration": DataLoaderConfiguration,
        "ProjectConfiguration": ProjectConfiguration,
        "DistributedDataParallelKwargs": DistributedDataParallelKwargs,
    }
    try:
        import accelerate.utils as hf_utils
    except ImportError:
        return make, types
    return make, {name: getattr(hf_utils, name) for name in types}


def main() -> None:
    which, out = sys.argv[1], Path(sys.argv[2])
    make, types = hf_factory() if which == "hf" else accel_factory()
    # every rank probes the same shared folder, as a script's ranks share their paths
    folder = out / f"{which}-work"
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):
        result = probe(make, folder, types)
    (out / f"{which}-rank{rank()}.json").write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
    if "accelerate" in sys.modules:  # end HF's group, as accel ends its own at exit
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
