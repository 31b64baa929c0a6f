"""Hugging Face Accelerate's ``by_feature`` examples, ported by changing one import,
train to the same weights under accel as under Accelerate, bit for bit.

The 8 scripts in tests/clients/by_feature/ are Accelerate's own (examples/by_feature),
with the Hub's dataset, tokenizer, model and metric swapped for the offline stand-ins
of by_feature/standins.py and the Accelerator imported from the facade
``BY_FEATURE_FACADE`` names. Each runs on 2 CPU ranks under ``accelerate launch
--multi_gpu --num_processes 2`` with Accelerate's ``Accelerator`` (``--cpu`` makes it
gloo's MULTI_CPU) and under ``accel launch --cpu -n 2`` with accel's; the main process's
final weights (``torch.save``) and every rank's per-epoch metrics (files: the two
launchers' workers share stdout) must be equal. Needs ``accelerate`` and
``transformers`` (``pytest -m clients``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from run_helpers import aborted_in_teardown, free_port

EXAMPLES = Path(__file__).resolve().parent / "by_feature"
ACCELERATE = shutil.which("accelerate", path=str(Path(sys.executable).parent))
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

pytestmark = [
    pytest.mark.clients,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(ACCELERATE is None, reason="Hugging Face Accelerate is not installed"),
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None,
        reason="transformers is not installed (the examples take their scheduler from it)",
    ),
]


def launch(facade: str, example: str, args: list[str], out: Path, accel_exe: list[str],
           extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """One example on 2 CPU ranks with ``facade``'s Accelerator; its files land in ``out``.
    Accelerate's run is a reference: one that gloo aborted in teardown, after the script
    finished, is asked again (up to 3 times) in a fresh ``out``; accel's run is not."""
    launcher = {
        "hf": [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               # its default 29500 is shared: two tests at once (-n 2) would meet there
               "--main_process_port", str(free_port())],
        "accel": [*accel_exe, "launch", "--cpu", "-n", "2"],
    }[facade]  # fmt: skip
    env = {
        **os.environ,
        **OFFLINE,
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HOME": str(out.parent / "hf-home"),
        "OMP_NUM_THREADS": "1",
        "BY_FEATURE_FACADE": facade,
        "BY_FEATURE_OUT": str(out),
        **(extra_env or {}),
    }
    for _ in range(3 if facade == "hf" else 1):
        shutil.rmtree(out, ignore_errors=True)  # the records are appended to
        out.mkdir(parents=True)
        done = subprocess.run(
            [*launcher, str(EXAMPLES / f"{example}.py"), "--cpu", *args],
            cwd=out.parent,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        if not aborted_in_teardown(done):
            break
    assert done.returncode == 0, (
        f"{facade} {example}:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    )
    return done


def results(out: Path) -> dict[str, Any]:
    """The main process's final weights and each rank's records (metrics, simulated OOMs)."""
    import torch

    weights = torch.load(out / "weights.pt", weights_only=True)
    records = {p.name: p.read_text().splitlines() for p in sorted(out.glob("*.jsonl"))}
    return {"weights": weights, "records": records}


def assert_same_weights(theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    assert list(ours) == list(theirs)
    differ = [k for k, v in theirs.items() if not ours[k].equal(v)]
    assert differ == [], f"final weights differ in {differ}"


def assert_same(theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    assert_same_weights(theirs["weights"], ours["weights"])
    assert {"metrics-rank0.jsonl", "metrics-rank1.jsonl"} <= set(theirs["records"])
    assert ours["records"] == theirs["records"]


def run_both(project: Path, accel_exe: list[str], example: str, args: list[str],
             extra_env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:  # fmt: skip
    found = {}
    for facade in ("hf", "accel"):
        out = project / facade
        given = [a.replace("{out}", str(out)) for a in args]
        launch(facade, example, given, out, accel_exe, extra_env)
        found[facade] = results(out)
    assert_same(found["hf"], found["accel"])
    return found


@pytest.mark.parametrize(
    ("example", "args"),
    [
        ("gradient_accumulation", ["--gradient_accumulation_steps", "2"]),
        ("local_sgd", ["--gradient_accumulation_steps", "2", "--local_sgd_steps", "3"]),
        ("multi_process_metrics", []),
    ],
)
def test_example_trains_to_accelerates_weights(
    project: Path, accel_exe: list[str], example: str, args: list[str]
) -> None:
    run_both(project, accel_exe, example, args)


def test_tracking_logs_what_accelerate_logs(project: Path, accel_exe: list[str]) -> None:
    run_both(project, accel_exe, "tracking", ["--with_tracking", "--project_dir", "{out}/logs"])
    if importlib.util.find_spec("tensorboard") is None:
        return  # log_with="all" finds no tracker under either facade
    theirs, ours = (logged(project / facade / "logs") for facade in ("hf", "accel"))
    assert sorted(theirs["scalars"]) == ["accuracy", "epoch", "f1", "train_loss"]
    assert ours == theirs


def logged(folder: Path) -> dict[str, Any]:
    """The scalars (tag: [(step, value)]) and hyperparameters a TensorBoard run holds."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars = {}
    for events in folder.rglob("events.out.tfevents.*"):
        run = EventAccumulator(str(events))
        run.Reload()
        scalars |= {t: [(e.step, e.value) for e in run.Scalars(t)] for t in run.Tags()["scalars"]}
    hparams = [p.read_text() for p in folder.rglob("hparams.yml")]
    return {"scalars": scalars, "hparams": hparams}


def test_profiler_trains_to_accelerates_weights(project: Path, accel_exe: list[str]) -> None:
    run_both(project, accel_exe, "profiler", ["--output_trace_dir", "{out}/traces"])
    for facade in ("hf", "accel"):
        traces = sorted(p.name for p in (project / facade / "traces").iterdir())
        assert traces == ["profile_0.json", "profile_1.json"], facade


@pytest.mark.parametrize(
    ("example", "limit", "failed"),
    [
        ("memory", 12, [16, 14]),
        ("automatic_gradient_accumulation", 128, [256, 230, 207, 186, 167, 150, 135]),
    ],
)
def test_batch_size_finder_retries_as_under_accelerate(
    project: Path, accel_exe: list[str], example: str, limit: int, failed: list[int]
) -> None:
    # The stand-in model raises the device's out-of-memory error over `limit` rows a
    # training step; Accelerate's finder then retries at 90% of the batch size, and the
    # automatic example accumulates 256 // 121 = 2 batches. Both facades fail the same
    # steps (every rank's record is compared) and end on the same weights.
    found = run_both(project, accel_exe, example, [], {"BY_FEATURE_MAX_ROWS": str(limit)})
    oom = found["accel"]["records"]["oom-rank0.jsonl"]
    assert [json.loads(line)["rows"] for line in oom] == failed


@pytest.mark.timeout(600)
def test_checkpointing_saves_and_resumes_to_accelerates_weights(
    project: Path, accel_exe: list[str]
) -> None:
    # 100 rows, batches of 16 on 2 ranks: 4 steps a rank per epoch, 12 in all; resuming
    # from step 6 restarts epoch 1 after its first 2 batches (skip_first_batches).
    found = run_both(project, accel_exe, "checkpointing",
                     ["--checkpointing_steps", "3", "--output_dir", "{out}/ck"])  # fmt: skip
    for facade in ("hf", "accel"):
        saved = sorted(p.name for p in (project / facade / "ck").iterdir())
        assert saved == ["step_12", "step_3", "step_6", "step_9"], facade
    out = project / "accel-resumed"
    resume = ["--resume_from_checkpoint", str(project / "accel" / "ck" / "step_6")]
    launch("accel", "checkpointing", [*resume, "--output_dir", str(out / "ck")], out, accel_exe)
    # accel resumes exactly: the resumed run ends on the uninterrupted run's weights, which
    # are Accelerate's. Accelerate's own resume of this script does not (it does not save
    # a plain shuffling sampler's generator: docs/compatibility.md, by_feature examples).
    resumed = results(out)
    assert_same_weights(found["hf"]["weights"], resumed["weights"])
    for name, lines in found["hf"]["records"].items():
        assert resumed["records"][name] == lines[1:], name  # epochs 1 and 2
