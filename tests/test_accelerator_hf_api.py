"""accel.Accelerator as Hugging Face Accelerate's Accelerator, without Accelerate installed.

The probe's calls (tests/clients/scripts/hf_probe.py) give what Accelerate 1.15 gave in
one process (hf_probe_golden.json, kept current by tests/clients/test_hf_api_probe.py,
which also compares 2 ranks live); rank-by-rank batches are Accelerate's
``BatchSamplerShard``'s (recorded from it); what accel does not run is refused in one
line at construction; a ported script resumes mid-epoch exactly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

import accel
import run_helpers
from accel.accelerator._hfdata import BatchShard, HfData, HfLoader
from accel.errors import UsageError
from run_helpers import Accel

SCRIPTS = Path(__file__).parent / "clients" / "scripts"
RESUME = Path(__file__).parent / "scripts" / "hf_style_resume.py"
sys.path.insert(0, str(SCRIPTS))

import hf_probe  # noqa: E402

#: Rows whose client library may be missing here (then not compared).
NEEDS = {"trackers_tensorboard": "tensorboard", "save_model_and_save": "safetensors"}


def test_the_probe_gives_accelerates_results_in_one_process(project: Path) -> None:
    golden = json.loads((SCRIPTS / "hf_probe_golden.json").read_text())
    make, types = hf_probe.accel_factory()
    ours = hf_probe.probe(make, project / "probe", types)
    for row, module in NEEDS.items():
        if importlib.util.find_spec(module) is None:
            golden.pop(row), ours.pop(row)
    assert {row: ours.get(row) for row in golden if ours.get(row) != golden[row]} == {}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_probe_gives_accelerates_results_on_two_ranks(
    project: Path, accel_exe: list[str]
) -> None:
    golden = json.loads((SCRIPTS / "hf_probe_golden_2ranks.json").read_text())
    script = str(SCRIPTS / "hf_probe.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [*accel_exe, "launch", "--cpu", "-n", "2", script, "accel", str(project)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        theirs = golden[f"rank{rank}"]
        ours = json.loads((project / f"accel-rank{rank}.json").read_text())
        for row, module in NEEDS.items():
            if importlib.util.find_spec(module) is None:
                theirs.pop(row), ours.pop(row)
        assert {row: ours.get(row) for row in theirs if ours.get(row) != theirs[row]} == {}


# Accelerate's BatchSamplerShard, rank by rank (recorded from accelerate 1.15):
# (samples, batch size, ranks, split_batches, even_batches, drop_last) -> per rank
SHARDS: list[tuple[tuple[int, int, int, bool, bool, bool], list[Any]]] = [
    ((10, 2, 2, False, True, False), [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]),
    ((7, 2, 2, False, True, False), [[[0, 1], [4, 5]], [[2, 3], [6, 0]]]),
    ((7, 2, 2, False, False, False), [[[0, 1], [4, 5]], [[2, 3], [6]]]),
    ((10, 3, 2, False, True, True), [[[0, 1, 2]], [[3, 4, 5]]]),
    ((10, 4, 2, True, True, False), [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]),
    ((7, 3, 3, False, True, False), [[[0, 1, 2]], [[3, 4, 5]], [[6, 0, 1]]]),
    ((11, 4, 2, True, True, False), [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 0]]]),
]


@pytest.mark.parametrize(("case", "expected"), SHARDS)
def test_each_rank_takes_whole_batches_in_turn_as_accelerate(
    case: tuple[int, int, int, bool, bool, bool], expected: list[Any]
) -> None:
    samples, size, ranks, split, even, drop = case
    for rank in range(ranks):
        batches = BatchSampler(SequentialSampler(range(samples)), size, drop)
        data = HfData(ranks, rank, split_batches=split, even_batches=even)
        shard = BatchShard(batches, data)
        assert list(shard) == expected[rank]
        assert len(shard) == len(expected[rank])


def test_a_ported_script_gets_accelerates_sharding_and_seed_keeps_accels(
    project: Path,
) -> None:
    assert accel.Accelerator().hf_compat  # a ported script: no seed, Accelerate's way
    assert accel.Accelerator(gradient_accumulation_steps=2, seed=1).hf_compat
    assert not accel.Accelerator(seed=0).hf_compat  # accel's seeded, epoch-ordered sampler
    assert not accel.Accelerator(hf_compat=False).hf_compat
    data = TensorDataset(torch.arange(8.0))
    hf_loader = accel.Accelerator().prepare(DataLoader(data, batch_size=2))
    ours = accel.Accelerator(seed=0).prepare(DataLoader(data, batch_size=2))
    assert type(hf_loader).__name__ == "HfLoader" and hasattr(ours, "skip_batches")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deepspeed_plugin": object()}, "does not run DeepSpeed"),
        ({"deepspeed_plugins": {"a": object()}}, "does not run DeepSpeed"),
        ({"megatron_lm_plugin": object()}, "does not run Megatron-LM"),
        ({"torch_tp_plugin": object()}, "tensor parallelism"),
        ({"parallelism_config": object()}, "composable parallelism"),
        ({"fsdp_plugin": object()}, "pass fsdp=True"),
        ({"log_with": "wandb"}, "pass the tracker object"),
        ({"log_with": "tensorboard"}, "needs a folder"),
        ({"log_with": "nonsense"}, "not a tracker accel knows"),
        ({"rng_types": ["xla"]}, "xla is not one of"),
        ({"gradient_accumulation_steps": 0}, "1 or more"),
        (
            {"dataloader_config": accel.DataLoaderConfiguration(dispatch_batches=True)},
            "dispatch_batches",
        ),
        (
            {"dataloader_config": accel.DataLoaderConfiguration(use_stateful_dataloader=True)},
            "use_stateful_dataloader",
        ),
    ],
)
def test_what_accel_does_not_run_is_refused_in_one_line(
    project: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        accel.Accelerator(**kwargs)
    assert "\n" not in str(caught.value)


#: Accelerate 1.15's ``DistributedType`` members (tests/clients/test_hf_api_probe.py
#: compares the installed Accelerate's).
ACCELERATE_DISTRIBUTED_TYPES = (
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA",
    "MULTI_XPU", "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON",
)  # fmt: skip


def test_distributed_type_has_every_member_a_ported_script_compares_with() -> None:
    # Accelerate's by_feature examples test ``distributed_type == DistributedType.XLA``
    # (an AttributeError when accel lacked the member); members are equal as strings.
    assert {m.name for m in accel.DistributedType} == set(ACCELERATE_DISTRIBUTED_TYPES)
    assert all(m == m.name for m in accel.DistributedType)
    assert accel.DistributedType.XLA != accel.DistributedType.MULTI_CPU


class DistributedDataParallelKwargs:  # the names Accelerate's handlers have
    def __init__(self, **options: Any) -> None:
        self.options = options

    def to_kwargs(self) -> dict[str, Any]:
        return self.options


class FP8RecipeKwargs(DistributedDataParallelKwargs):
    pass


class SomethingKwargs(DistributedDataParallelKwargs):
    pass


@pytest.mark.parametrize(
    ("handlers", "message"),
    [
        ([FP8RecipeKwargs()], "fp8 training, which accel does not run"),
        ([SomethingKwargs()], "SomethingKwargs is not one accel knows"),
        ([DistributedDataParallelKwargs(comm_hook="fp16")], "communication hooks"),
        ([DistributedDataParallelKwargs(), DistributedDataParallelKwargs()], "passed twice"),
    ],
)
def test_unknown_kwargs_handlers_are_refused(project: Path, handlers: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        accel.Accelerator(kwargs_handlers=handlers)


def test_load_state_of_a_folder_that_is_not_a_checkpoint_says_so(project: Path) -> None:
    acc = accel.Accelerator()
    with pytest.raises(UsageError, match="the folder does not exist; pass a folder"):
        acc.load_state("nowhere")
    hf = project / "hf_ckpt"
    hf.mkdir()
    (hf / "random_states_0.pkl").write_bytes(b"\x80")
    with pytest.raises(UsageError, match="Hugging Face Accelerate checkpoint"):
        acc.load_state(str(hf))


def test_accelerates_folder_keywords_save_and_load_that_folder(project: Path) -> None:
    # load_state(input_dir=...) was swallowed and loaded the newest step (none here):
    # the run went on from its own weights without a word.
    acc = accel.Accelerator()
    model = acc.prepare(torch.nn.Linear(2, 1))
    with torch.no_grad():
        model.weight.fill_(1.0)
    acc.save_state(output_dir=str(project / "ckpt" / "epoch_1"))
    with torch.no_grad():
        model.weight.fill_(7.0)
    acc.load_state(input_dir=str(project / "ckpt" / "epoch_1"))
    assert model.weight.tolist() == [[1.0, 1.0]]
    with pytest.raises(UsageError, match="give a step or input_dir=, not both"):
        acc.load_state(3, input_dir="ckpt/epoch_1")


def test_a_model_prepared_for_evaluation_is_not_wrapped(project: Path) -> None:
    acc = accel.Accelerator()
    acc.world_size = 2  # as on a second rank; evaluation_mode asks for no DDP to wrap
    model = torch.nn.Linear(2, 1)
    assert acc.prepare_model(model, evaluation_mode=True) is model
    assert acc._models == [model]


def test_print_prints_once_per_node(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    acc = accel.Accelerator()
    acc.rank, acc.local_rank = 1, 0  # the first rank of a second node: Accelerate prints
    acc.print("node 1")
    acc.local_rank = 1
    acc.print("not here")
    assert capsys.readouterr().out == "node 1\n"


@pytest.mark.parametrize("hf", [True, False], ids=["accelerate-sharding", "accel-sharding"])
def test_skip_first_batches_is_that_much_shorter_each_time_as_accelerates(
    project: Path, hf: bool
) -> None:
    # len() stayed the whole epoch's while the loop got fewer batches: progress totals
    # and `step == len(loader) - 1` checks were off by the batches skipped.
    acc = accel.Accelerator(hf_compat=hf)
    loader = acc.prepare(DataLoader(TensorDataset(torch.arange(12)), batch_size=2))
    assert isinstance(loader, HfLoader) == hf
    active = acc.skip_first_batches(loader, 2)
    assert len(active) == 4 and len(loader) == 6
    firsts = [[int(b[0][0]) for b in active] for _ in range(2)]
    assert firsts == [[4, 6, 8, 10]] * 2 and len(list(loader)) == 6


def test_collectives_after_the_group_ended_are_one_line_not_local_data(project: Path) -> None:
    # After end() (or another Accelerator's), each rank got its own data back as the
    # gather of all, while num_processes still said 2.
    acc = accel.Accelerator()
    acc.world_size = 2  # a rank of a 2-rank run whose group end() has torn down
    for collective in (acc.gather, acc.gather_for_metrics, acc.reduce, acc.pad_across_processes):
        with pytest.raises(UsageError, match="this run's process group has ended"):
            collective(torch.tensor([1]))


class _Rows:
    """What the split needs of a Hugging Face ``datasets.Dataset``: len and select."""

    def __init__(self, rows: list[str]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, indices: list[int]) -> _Rows:
        return _Rows([self.rows[i] for i in indices])


@pytest.mark.parametrize(
    ("rank", "padding", "expected"),
    [(0, False, ["p0", "p1", "p2"]), (1, False, ["p3", "p4"]), (1, True, ["p3", "p4", "p4"])],
)
def test_a_hugging_face_dataset_is_split_between_processes(
    monkeypatch: pytest.MonkeyPatch, rank: int, padding: bool, expected: list[str]
) -> None:
    # Every rank got the whole dataset: distributed inference did all the work twice.
    from accel.accelerator._ops import split_rows

    monkeypatch.setitem(sys.modules, "datasets", type(sys)("datasets"))
    monkeypatch.setattr(sys.modules["datasets"], "Dataset", _Rows, raising=False)
    rows = _Rows([f"p{i}" for i in range(5)])
    assert split_rows(rows, rank, 2, padding, torch.device("cpu")).rows == expected


@pytest.mark.parametrize("kind", ["list", "tuple", "tensor", "dataset"])
@pytest.mark.parametrize("padding", [False, True])
def test_a_rank_past_the_end_takes_the_last_input_as_accelerates(
    monkeypatch: pytest.MonkeyPatch, kind: str, padding: bool
) -> None:
    """One prompt, two ranks: rank 1 got nothing (Accelerate gives it the last one)."""
    from accel.accelerator._ops import split_rows

    monkeypatch.setitem(sys.modules, "datasets", type(sys)("datasets"))
    monkeypatch.setattr(sys.modules["datasets"], "Dataset", _Rows, raising=False)
    made = {
        "list": lambda: ["only"],
        "tuple": lambda: ("only",),
        "tensor": lambda: torch.tensor([7]),
        "dataset": lambda: _Rows(["only"]),
    }[kind]
    shares = [split_rows(made(), rank, 2, padding, torch.device("cpu")) for rank in (0, 1)]
    if kind == "tensor":
        assert [s.tolist() for s in shares] == [[7], [7]]
    elif kind == "dataset":
        assert [s.rows for s in shares] == [["only"], ["only"]]
    else:
        assert list(shares) == [made(), made()]


def _run(acc: Any, stop: int = 0, resume: bool = False) -> tuple[list[Any], Any]:
    """Two epochs of a shuffled loader, as a ported script runs them: with ``stop``,
    save at that step and return; with ``resume``, start from the latest checkpoint."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(12, 2), torch.randn(12))
    model, opt, loader = acc.prepare(model, opt, DataLoader(data, batch_size=2, shuffle=True))
    step = (acc.load_state() or 0) if resume else 0
    seen = []
    for epoch in range(step // len(loader), 2):
        skip = step % len(loader) if epoch == step // len(loader) else 0
        for x, y in acc.skip_first_batches(loader, skip) if skip else loader:
            loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y + torch.rand(1))
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            seen.append(y.tolist())
            step += 1
            if step == stop:
                acc.save_state(step)
                return seen, None
    return seen, acc.get_state_dict(model)


@pytest.mark.parametrize("stop", [2, 6, 9], ids=["mid-epoch", "epoch-end", "second-epoch"])
def test_a_ported_script_resumes_bit_for_bit(project: Path, stop: int) -> None:
    whole, weights = _run(accel.Accelerator())
    first, _ = _run(accel.Accelerator(), stop=stop)
    rest, resumed = _run(accel.Accelerator(), resume=True)
    assert first + rest == whole
    assert all(torch.equal(weights[k], resumed[k]) for k in weights)


@pytest.fixture(scope="module")
def whole_two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The script's uninterrupted run on two ranks, its final weights: one launch per
    module and test process, in a project and HOME of its own."""
    project = tmp_path_factory.mktemp("whole")
    (project / "whole").mkdir()
    done = subprocess.run(
        [*run_helpers.accel_command(), "launch", "--cpu", "-n", "2", str(RESUME), "whole", "0"],
        cwd=project, env=run_helpers.alone_env(project), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((project / "whole" / "final.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", ["7", "10"], ids=["mid-epoch", "epoch-end"])
def test_a_ported_script_resumes_on_two_ranks_bit_for_bit(
    accel: Accel, project: Path, stop: str, whole_two_ranks: Any
) -> None:
    """save_state(folder)/load_state(folder), accumulation, a scheduler stepped per rank,
    a shuffled loader and dropout: stopped and resumed, the weights are the whole run's."""
    (project / "part").mkdir()
    for at in (stop, "0"):
        done = accel("launch", "--cpu", "-n", "2", str(RESUME), "part", at, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    assert f"resumed at step {stop}" in done.stdout
    assert json.loads((project / "part" / "final.json").read_text()) == whole_two_ranks


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_folder_per_save_costs_no_thread_or_socket_per_folder(accel: Accel) -> None:
    # Each folder's store made a gloo group of its own: 3 threads and a socket per peer a
    # save on each rank, kept to the end (a 64-rank job out of descriptors by its 16th).
    script = Path(__file__).parent / "scripts" / "hf_many_folders.py"
    done = accel("launch", "--cpu", "-n", "2", str(script), timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
