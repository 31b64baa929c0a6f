"""Journey: preload, restart and hang detection together, end to end, with real processes.

`accel launch -n 2 --preload --max-restarts 2 --hang-timeout ... --hang-action kill` of
a script whose rank 1 crashes in the first attempt and hangs in the second; the third
trains. What a user relies on where these features meet: the run restarts twice and
succeeds, the hang is detected and blamed on the sleeping rank, every forked worker of
every attempt draws its own random numbers (dropout included), and no process or
scratch folder of the run is left.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from accel.launch.guard import run_processes
from run_helpers import run_folder, run_json, wait_for

Accel = Callable[..., subprocess.CompletedProcess[str]]

SCRIPT = """
import json, os, sys, time

import torch
import torch.distributed as dist

out = sys.argv[1]
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
mask = torch.nn.functional.dropout(torch.ones(64), 0.5).nonzero().flatten().tolist()
seen = {"pid": os.getpid(), "seed": torch.initial_seed(), "mask": mask}
with open(os.path.join(out, f"a{attempt}-r{rank}.json"), "w") as fh:
    json.dump(seen, fh)
print(f"rank {rank} attempt {attempt} starts", flush=True)  # activity, for the detector
dist.init_process_group("gloo")
print(f"rank {rank} attempt {attempt} up", flush=True)


def stuck_in_sleep():
    time.sleep(600)


if attempt == 0 and rank == 1:
    raise RuntimeError("simulated crash in the first attempt")
if attempt == 1 and rank == 1:
    stuck_in_sleep()  # nothing prints: the hang detector's case
if attempt < 2:
    dist.barrier()  # rank 0 waits here for the crashed or the sleeping rank
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
for step in range(3):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    loss.backward()
    for param in model.parameters():
        dist.all_reduce(param.grad)
    print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_preloaded_run_crashes_hangs_restarts_and_trains_with_its_own_random_numbers(
    accel: Accel, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"  # the launcher's private folders (log FIFOs, preload socket)
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    (project / "train.py").write_text(SCRIPT)
    out = project / "out"
    out.mkdir()
    done = accel(
        "launch",
        "-n",
        "2",
        "--preload",
        "--max-restarts",
        "2",
        "--hang-timeout",
        "5s",
        "--hang-action",
        "kill",
        "train.py",
        str(out),
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    assert "the workers start by exec" not in done.stderr  # they really were forked

    record = run_json(project)
    assert record["status"] == "succeeded" and record["restarts"] == 2
    crash = {f["rank"]: f for f in record["attempts"][0]["failures"]}
    assert crash[1]["fate"] == "failed"
    (hang,) = record["hangs"]
    assert hang["stuck"] == [1]
    assert "rank 1 is stuck in stuck_in_sleep" in done.stderr

    seen = {
        (a, r): json.loads((out / f"a{a}-r{r}.json").read_text()) for a in range(3) for r in (0, 1)
    }
    seeds = [s["seed"] for s in seen.values()]
    assert len(set(seeds)) == len(seeds), f"a torch seed repeats across ranks/attempts: {seeds}"
    assert seen[2, 0]["mask"] != seen[2, 1]["mask"]  # unseeded dropout: each rank its own

    assert not run_processes(run_folder(project).name)
    workers = [s["pid"] for s in seen.values()]
    wait_for(lambda: not any(_alive(p) for p in workers), 10, f"the workers {workers} to end")
    assert not any(scratch.iterdir()), sorted(scratch.iterdir())
