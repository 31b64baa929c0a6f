"""FSDP under `accel launch`: a crash + restart resumes bit for bit on 2 CPU ranks (gloo).

Real processes, real signals: rank 1 raises mid-run, rank 1 is SIGKILLed inside a save
with its shards written, or rank 0 is SIGKILLed inside a save just before the manifest
that would commit it. Each crashed run restarts (--max-restarts 1) from the last
committed checkpoint and must end with the weights and losses of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accel.workspace import Workspace

# Leans on torch's internals: the tests marked `edge` also run on the oldest and the
# newest torch (.ci/run), one case per journey; the rest run on the default.

SCRIPT = Path(__file__).resolve().parent / "scripts" / "train_fsdp.py"
TRAIN = ("20", "5")  # 20 steps, a checkpoint every 5


def _accel(project: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "accel"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "accel"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), OMP_NUM_THREADS="1")
    return subprocess.run(
        [*cmd, *args], cwd=project, env=env, capture_output=True, text=True, timeout=240
    )


def _train(project: Path, name: str, crash: str, *launch: str) -> Path:
    out = project / name
    out.mkdir()
    done = _accel(
        project,
        project.parent / "home",
        *("launch", "-n", "2", "--fsdp", "--run-name", name, *launch),
        *(str(SCRIPT), *TRAIN, crash, str(out)),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _losses(project: Path, name: str) -> dict[int, float]:
    """The loss of every step (a restarted step: its last value)."""
    runs = json.loads(_accel(project, project.parent / "home", "runs", "--json").stdout)
    (run,) = [r for r in runs if r["name"] == name]
    lines = (Path(run["path"]) / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines)}


def _reports(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One uninterrupted FSDP run: (its project, its output folder)."""
    project = tmp_path_factory.mktemp("fsdp") / "project"
    project.mkdir()
    (project.parent / "home").mkdir()
    return project, _train(project, "clean", "none")


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_model_is_sharded_and_exported_whole(clean: tuple[Path, Path]) -> None:
    project, out = clean
    reports = _reports(out)
    total = reports[0]["total"]
    for report in reports:
        assert report["dtensor"] and report["shard0"], report  # DTensor, Shard(0)
        assert 0.4 * total < report["local"] < 0.6 * total, report  # about half each
        assert report["fsdp_modules"] == ["<root>", "blocks.0", "blocks.1", "blocks.2"]
        assert report["resumed"] is None
    assert sum(r["local"] for r in reports) == total
    # acc.get_state_dict: the whole model on rank 0 (rank 1 checked it got {}).
    final = torch.load(out / "final.pt", weights_only=True)
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from train_fsdp import Net
    finally:
        sys.path.remove(str(SCRIPT.parent))
    shapes = {k: tuple(v.shape) for k, v in Net().state_dict().items()}
    assert {k: tuple(v.shape) for k, v in final.items()} == shapes
    assert sum(v.numel() for v in final.values()) == total
    # Every save committed the shards of both ranks, hashed into the manifest.
    infos = Workspace(project / ".accelerate").checkpoints.list("clean")
    assert [i.step for i in infos] == [10, 15, 20] and all(i.world_size == 2 for i in infos)
    for info in infos:
        sharded = {f for f in info.files if f.startswith("sharded/")}
        assert {"sharded/.metadata", "sharded/__0_0.distcp", "sharded/__1_0.distcp"} <= sharded


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_accel_checkpoints_export_consolidates_the_sharded_model(
    clean: tuple[Path, Path],
) -> None:
    from safetensors.torch import load_file

    project, out = clean
    target = project.parent / "model.safetensors"
    done = _accel(
        project, project.parent / "home", "checkpoints", "export", "20", "-o", str(target)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    exported = load_file(str(target))
    final = torch.load(out / "final.pt", weights_only=True)  # the last step is step 20
    assert sorted(exported) == sorted(final)
    assert all(torch.equal(exported[k], final[k]) for k in final)


@pytest.mark.slow
@pytest.mark.timeout(300)
# on the oldest and newest torch, one crash: a kill between steps (the others are
# kills inside accel's own save, which no torch release changes)
@pytest.mark.parametrize(
    "crash", [pytest.param("step:13", marks=pytest.mark.edge), "shards:15", "commit:15"]
)
def test_a_crash_and_restart_resumes_bit_for_bit(clean: tuple[Path, Path], crash: str) -> None:
    project, straight = clean
    name = "crashed-" + crash.replace(":", "-")
    out = _train(project, name, crash, "--max-restarts", "1")
    assert [r["resumed"] for r in _reports(out)] == [10, 10]  # step 15 never committed
    a = torch.load(straight / "final.pt", weights_only=True)
    b = torch.load(out / "final.pt", weights_only=True)
    assert a.keys() == b.keys()
    for key, tensor in a.items():
        assert torch.equal(tensor, b[key]), key
    assert _losses(project, name) == _losses(project, "clean")
    infos = Workspace(project / ".accelerate").checkpoints.list(name)
    assert [i.step for i in infos] == [10, 15, 20]
