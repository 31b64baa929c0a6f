"""accel.Accelerator: single process, and a real 2-rank gloo job resumed bit for bit."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import accel
from accel.errors import UsageError
from run_helpers import free_port, two_ranks

SCRIPT = Path(__file__).parent / "store" / "scripts" / "train.py"


@pytest.mark.slow
def test_import_accel_does_not_import_torch() -> None:
    code = (
        "import sys, accel, accel.store.kv, accel.store.cache, accel.store.checkpoints\n"
        "ws = accel.Workspace.discover(); ws.store.get('x'); ws.cache.get('x')\n"
        "names = dir(accel)\n"
        "assert 'Accelerator' in names and 'Workspace' in names, names\n"
        "assert 'TYPE_CHECKING' not in names and 'Any' not in names, names\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _setup() -> tuple[accel.Accelerator, Any, Any, Any, Any]:
    acc = accel.Accelerator(seed=3)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    data = TensorDataset(torch.arange(40.0).reshape(10, 4), torch.zeros(10, 2))
    loader = DataLoader(data, batch_size=2, shuffle=True)
    return acc, *acc.prepare(model, opt, sched, loader)


def test_single_process_defaults(project: Path) -> None:
    acc = accel.Accelerator()
    assert (acc.rank, acc.local_rank, acc.world_size) == (0, 0, 1)
    assert acc.is_main_process and acc.device == torch.device("cpu")
    assert acc.mixed_precision == "no"
    with acc.autocast():
        pass
    acc.wait_for_everyone()
    with pytest.raises(UsageError, match="prepare"):
        acc.prepare(object())
    acc.end()


def test_precision_from_the_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    acc = accel.Accelerator()
    assert acc.mixed_precision == "bf16" and acc.device.type == "cpu"
    with acc.autocast():
        out = torch.nn.Linear(4, 4)(torch.ones(2, 4))
    assert out.dtype == torch.bfloat16
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8")
    with pytest.raises(UsageError, match="mixed precision"):
        accel.Accelerator()


def test_prepared_loader_is_seeded_and_epoch_aware(project: Path) -> None:
    _, _, _, _, loader = _setup()
    loader.set_epoch(0)
    first = [b[0][:, 0].tolist() for b in loader]
    assert [b[0][:, 0].tolist() for b in loader] == first
    loader.set_epoch(1)
    second = [b[0][:, 0].tolist() for b in loader]
    assert second != first and sorted(v for b in second for v in b) == sorted(
        v for b in first for v in b
    )
    loader.set_epoch(1)
    loader.skip_batches(3)
    assert [b[0][:, 0].tolist() for b in loader] == second[3:]
    assert len(loader) == 5


def test_save_and_load_state_restore_everything(project: Path) -> None:
    acc, model, opt, sched, loader = _setup()
    assert acc.load_state() is None
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    sched.step()
    loader.set_epoch(4)
    acc.save_state(7, extra={"best": 0.5})
    expected = (torch.rand(3), random.random(), np.random.rand())
    weights = [p.detach().clone() for p in model.parameters()]

    acc2, model2, opt2, sched2, loader2 = _setup()
    assert acc2.load_state() == 7
    assert all(torch.equal(a, b) for a, b in zip(weights, model2.parameters(), strict=True))
    assert opt2.state_dict()["state"][0]["momentum_buffer"] is not None
    assert sched2.state_dict() == sched.state_dict()
    assert loader2.epoch == 4
    assert acc2.extra_state == {"best": 0.5}
    assert torch.equal(torch.rand(3), expected[0])
    assert random.random() == expected[1] and np.random.rand() == expected[2]


def test_load_state_into_other_objects_is_refused(project: Path) -> None:
    acc = accel.Accelerator()
    acc.prepare(torch.nn.Linear(2, 2))
    acc.save_state(1)
    other = accel.Accelerator()
    other.prepare(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with pytest.raises(UsageError, match="holds 1 models but 2 were prepared"):
        other.load_state()


def _net() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


@pytest.mark.parametrize(("saved", "loaded"), [(True, False), (False, True), (True, True)])
def test_compiling_or_not_keeps_a_checkpoint_loadable(
    project: Path, saved: bool, loaded: bool
) -> None:
    # a compiled model's checkpoints held '_orig_mod.'-prefixed keys: without compile the
    # same script could not load them, and export gave them to the Hub as they were
    acc = accel.Accelerator()
    net = _net()
    model = acc.prepare(torch.compile(net, backend="eager") if saved else net)
    assert list(acc.get_state_dict(model)) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert acc.unwrap_model(model) is model  # Accelerate's default keeps the compiled one
    assert acc.unwrap_model(model, keep_torch_compile=False) is net
    acc.save_state(5)
    other = accel.Accelerator()
    fresh = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    other.prepare(torch.compile(fresh, backend="eager") if loaded else fresh)
    assert other.load_state() == 5
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), net.parameters(), strict=True))


def test_a_checkpoint_saved_with_the_compiled_keys_still_loads(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel.accelerator import _ddp

    acc = accel.Accelerator()
    net = _net()
    model = acc.prepare(torch.compile(net, backend="eager"))
    with monkeypatch.context() as patched:  # as accel saved it before: the compiled keys
        patched.setattr(_ddp, "unwrap", lambda m, keep_torch_compile=True: m)
        acc.save_state(6)
    assert model is not net
    other = accel.Accelerator()
    fresh = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    other.prepare(fresh)
    assert other.load_state() == 6
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), net.parameters(), strict=True))


def test_a_step_is_any_integer_and_anything_else_is_one_line(project: Path) -> None:
    # numpy's int64 or a 0-d tensor fell through to the folder form: TypeError from fspath
    acc = accel.Accelerator()
    acc.prepare(torch.nn.Linear(2, 2))
    assert acc.save_state(np.int64(3)).step == 3
    assert acc.save_state(torch.tensor(4)).step == 4
    for bad, shown in ((1.5, "float 1.5"), (True, "bool True"), (torch.tensor(4.0), "Tensor")):
        with pytest.raises(UsageError, match=f"takes a step \\(an integer\\) or a folder.*{shown}"):
            acc.save_state(bad)
    (project / "afile").write_text("")
    with pytest.raises(accel.errors.WriteFailed, match="a part of that path is a file"):
        acc.save_state(str(project / "afile" / "checkpoint"))  # was a raw NotADirectoryError
    loader = acc.prepare(DataLoader(TensorDataset(torch.arange(10.0)), batch_size=2))
    for bad in (-1, 1.5, "2", True):  # -1 was islice's ValueError, the rest taken silently
        with pytest.raises(UsageError, match="batches to skip must be an integer from 0"):
            acc.skip_first_batches(loader, bad)
    assert len(list(acc.skip_first_batches(loader, np.int64(3)))) == 2


def test_a_save_in_the_middle_of_gradient_accumulation_says_what_is_lost(project: Path) -> None:
    # silently: the accumulated gradients are in no checkpoint, a resume trains otherwise
    acc = accel.Accelerator(gradient_accumulation_steps=3)
    model = torch.nn.Linear(2, 1)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for micro in range(1, 6):  # the count is of the micro-steps since the last sync
        with acc.accumulate(model):
            acc.backward(model(torch.ones(1, 2)).sum())
            opt.step()
            opt.zero_grad()
        if micro % 3:
            with pytest.warns(UserWarning, match=f"over the last {micro % 3} micro-step"):
                acc.save_state(micro)
        if micro == 3:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # after the optimizer step: nothing to say
                acc.save_state(3)


class Counter:
    """An object of a script's own, registered for checkpointing."""

    def __init__(self, n: int) -> None:
        self.n = n

    def state_dict(self) -> dict[str, int]:
        return {"n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.n = state["n"]


@pytest.mark.parametrize("count", [1, 3])
def test_registered_objects_of_another_count_are_refused(project: Path, count: int) -> None:
    # zipped without a check: a third object silently kept its state, a second saved
    # one was silently dropped
    acc = accel.Accelerator()
    acc.register_for_checkpointing(Counter(10), Counter(11))
    acc.save_state(4)
    other = accel.Accelerator()
    objects = [Counter(-1) for _ in range(count)]
    other.register_for_checkpointing(*objects)
    with pytest.raises(UsageError) as caught:
        other.load_state()
    assert str(caught.value) == (
        f"the checkpoint of step 4 holds 2 objects but {count} were registered; "
        "register_for_checkpointing() the same objects as the run that saved it"
    )
    same = accel.Accelerator()
    restored = [Counter(-1), Counter(-1)]
    same.register_for_checkpointing(*restored)
    assert same.load_state() == 4 and [c.n for c in restored] == [10, 11]


@pytest.mark.parametrize("what", ["model", "optimizer"])
def test_a_checkpoint_of_another_model_is_one_line_saying_so(project: Path, what: str) -> None:
    """Two scripts of one project share the `default` series: the second's load_state()
    found the first's newest checkpoint and died in torch's own multi-line
    "Error(s) in loading state_dict ... Missing key(s)"."""
    acc = accel.Accelerator()
    net = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    acc.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
    acc.save_state(200)
    other = accel.Accelerator()
    if what == "model":
        model = torch.nn.Linear(2, 2)
        params = list(model.parameters())
    else:  # the same model, an optimizer with one parameter group too many
        model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
        params = [{"params": model[0].parameters()}, {"params": model[2].parameters()}]
    other.prepare(model, torch.optim.SGD(params, lr=0.1))
    with pytest.raises(UsageError) as caught:
        other.load_state()
    line = str(caught.value)
    assert "\n" not in line and len(line) < 600, line
    assert f"the checkpoint of step 200 does not fit this run's {what} 0" in line, line
    assert "--run-name" in line, line
    if what == "model":
        assert 'Missing key(s) in state_dict: "weight"' in line, line


def test_log_appends_json_lines(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = accel.Accelerator()
    acc.log({"loss": torch.tensor(0.5), "lr": 0.1}, step=1)
    acc.log({"loss": 0.25}, step=2)
    local = acc.workspace.runs_dir / "local" / "metrics.jsonl"
    lines = [json.loads(line) for line in local.read_text().splitlines()]
    assert [(r["step"], r["loss"], r["rank"]) for r in lines] == [(1, 0.5, 0), (2, 0.25, 0)]
    assert isinstance(lines[0]["time"], float) and lines[0]["lr"] == 0.1

    monkeypatch.setenv("ACCEL_RUN_ID", "run-42")
    monkeypatch.setenv("RANK", "1")  # not the main process: nothing unless all_ranks
    other = accel.Accelerator(workspace=acc.workspace)
    other.log({"loss": 1.0}, step=1)
    assert not other.metrics_file.exists()
    other.log({"loss": 1.0}, step=1, all_ranks=True)
    assert other.metrics_file == acc.workspace.runs_dir / "run-42" / "metrics.jsonl"
    assert json.loads(other.metrics_file.read_text())["rank"] == 1
    with pytest.raises(UsageError, match="metric"):
        acc.log({"bad": object()}, step=3)


def test_a_list_of_numbers_is_logged_one_entry_each(project: Path) -> None:
    """`acc.log({"lr": scheduler.get_last_lr()})`, as Accelerate scripts write it, raised
    UsageError (a list) and ended the run."""
    acc = accel.Accelerator()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD([{"params": model.weight}, {"params": model.bias, "lr": 0.5}], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    acc.log({"lr": scheduler.get_last_lr(), "pair": (torch.tensor(1.5), 2)}, step=1)
    (line,) = (acc.workspace.runs_dir / "local" / "metrics.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert {k: record[k] for k in ("lr/0", "lr/1", "pair/0", "pair/1")} == {
        "lr/0": 0.1,
        "lr/1": 0.5,
        "pair/0": 1.5,
        "pair/1": 2,
    }
    with pytest.raises(UsageError, match=r"metric 'bad/0' is a object"):
        acc.log({"bad": [object()]}, step=2)  # what is in it is checked as before


def test_log_never_kills_training(project: Path, caplog: pytest.LogCaptureFixture) -> None:
    acc = accel.Accelerator()
    acc.workspace.ensure()
    acc.workspace.runs_dir.mkdir(parents=True, exist_ok=True)
    (acc.workspace.runs_dir / "local").write_text("a file where a folder should be")
    with caplog.at_level("WARNING", logger="accel"):
        acc.log({"loss": 1.0}, step=1)  # logged as a warning, not raised
        acc.log({"loss": 0.5}, step=2)  # and the next call is still answered
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("could not write metrics" in w for w in warnings) == 2, warnings
    assert (acc.workspace.runs_dir / "local").read_text() == "a file where a folder should be"


def test_clean_cache(project: Path) -> None:
    acc = accel.Accelerator()
    acc.workspace.cache.put("a", 1)
    assert acc.clean_cache(older_than="1h") == []
    assert [e.key for e in acc.clean_cache()] == ["a"]


def test_clean_cache_keeps_a_live_runs_entries_as_accel_clean_does(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel._locks import locked
    from accel.clean import clean
    from accel.layout import run_lock

    acc = accel.Accelerator()
    ws = acc.workspace
    monkeypatch.setenv("ACCEL_RUN_ID", "20260101-000000-abcdef")
    ws.cache.put("mine", 1)
    monkeypatch.delenv("ACCEL_RUN_ID")
    ws.cache.put("other", 2)
    with locked(run_lock(ws.path, "20260101-000000-abcdef")):
        plan = clean(ws, only=["cache"], older_than=0, dry_run=True).plan
        assert [k.item.name for k in plan.kept] == ["mine"]
        assert [p.item.name for p in plan.items] == ["other"]
        assert [e.key for e in acc.clean_cache()] == ["other"]
        assert [e.key for e in ws.cache.entries()] == ["mine"]


def test_the_second_cache_cleaner_is_gone_with_a_pointer(project: Path) -> None:
    acc = accel.Accelerator()
    with pytest.raises(UsageError, match=r"accel\.clean\.clean_cache"):
        acc.workspace.cache.clean()


# -- a real 2-rank gloo job --------------------------------------------------------------


def _env(workspace: Path, async_save: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env.update(ACCEL_WORKSPACE=str(workspace), OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env["ACCEL_CHECKPOINTS_ASYNC_SAVE"] = "true" if async_save else "false"
    return env


def _run_ranks(workspace: Path, args: list[str], async_save: bool = False) -> list[int]:
    """Two ranks started with the torchrun environment, without the elastic agent."""
    return two_ranks(SCRIPT, args, _env(workspace, async_save))


def _run_torchrun(workspace: Path, args: list[str], async_save: bool = False) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", str(free_port()), str(SCRIPT), *args]
    return subprocess.run(cmd, env=_env(workspace, async_save), timeout=120).returncode


def _losses(workspace: Path) -> dict[int, float]:
    lines = (workspace / "logs" / "runs" / "local" / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines)}


TOTAL, SAVE_EVERY = "24", "8"


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], dict[int, float]]:
    """The uninterrupted two-rank run, saving synchronously: its final weights and its
    losses by step. One run per module and test process, in a HOME of its own."""
    folder = tmp_path_factory.mktemp("straight")
    workspace, a_pt = folder / ".accelerate", folder / "a.pt"
    env = {**_env(workspace), "HOME": str(folder), "XDG_CONFIG_HOME": str(folder / ".config")}
    assert two_ranks(SCRIPT, [TOTAL, SAVE_EVERY, "-1", str(a_pt)], env) == [0, 0]
    losses = _losses(workspace)
    assert len(losses) == 24
    return torch.load(a_pt, weights_only=True), losses


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "overlapped"])
def test_resume_reproduces_an_uninterrupted_two_rank_run(
    tmp_path: Path, async_save: bool, straight: tuple[list[Any], dict[int, float]]
) -> None:
    """Overlapped: every save_state of the crashed run is an overlapped snapshot
    (checkpoints.async_save), fenced by the next optimizer step; it and its restart end
    where the uninterrupted run that saved synchronously did, bit for bit."""
    resumed = tmp_path / "resumed" / ".accelerate"
    total, save_every, crash_at = TOTAL, SAVE_EVERY, "13"
    b_pt = str(tmp_path / "b.pt")
    crashed = _run_ranks(resumed, [total, save_every, crash_at, b_pt], async_save)
    assert crashed == [3, 3] and not (tmp_path / "b.pt").exists()
    ckpts = accel.Workspace(resumed).checkpoints
    assert [i.step for i in ckpts.list()] == [8]
    assert sorted(ckpts.latest().files) == ["rank-0.tensors", "rank-1.tensors", "state.tensors"]  # type: ignore[union-attr]

    # The restart goes through torchrun itself: any torchrun script runs unchanged.
    assert _run_torchrun(resumed, [total, save_every, "-1", b_pt], async_save) == 0

    a, straight_losses = straight
    b = torch.load(tmp_path / "b.pt", weights_only=True)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    resumed_losses = _losses(resumed)
    assert all(resumed_losses[s] == straight_losses[s] for s in range(1, 25))
    assert [i.step for i in ckpts.list()] == [8, 16, 24]


def test_end_group_at_exit_is_idempotent_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    from accel.accelerator import _setup as setup

    calls: list[str] = []

    def broken() -> None:
        calls.append("destroy")
        raise RuntimeError("gloo: connection reset")

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "destroy_process_group", broken)
    setup.end_group()  # nothing escapes: an exit handler must not fail a finished run
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    setup.end_group()  # already gone (end() ran): nothing to do
    assert calls == ["destroy"]
