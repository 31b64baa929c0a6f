"""torchrun's ``PET_*`` variables: what Kubernetes (PyTorchJob, TrainJob) and TorchX set
instead of flags. Each is read as torchrun's own parser reads it (checked against the
installed torch), a flag typed wins, and two "pods" on loopback form one world."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, dry_run_json

from accel.cli._launch_pet import APPLIED
from accel.cli.main import main
from run_helpers import free_port

SCRIPT = str(SCRIPTS / "env_dump.py")
# What a two-node job needs besides the variable under test.
TWO_NODES = {"PET_NNODES": "2", "PET_MASTER_ADDR": "10.1.2.3", "PET_MASTER_PORT": "23456"}


def torchrun_args(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Any:
    """What torchrun's own parser makes of ``env`` (it reads PET_* as it is built)."""
    from torch.distributed.run import get_args_parser

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return get_args_parser().parse_args([SCRIPT])


def plan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
    *args: str,
) -> dict[str, Any]:  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dry_run_json(capsys, "--cpu", *args, SCRIPT)


def test_every_variable_torchrun_reads_is_applied() -> None:
    """A torch release that adds a PET_ variable fails here until it is placed."""
    from torch.distributed.argparse_util import check_env, env
    from torch.distributed.run import get_args_parser

    theirs = {a.dest for a in get_args_parser()._actions if isinstance(a, (env, check_env))}
    assert theirs - set(APPLIED) == set(), "torchrun reads PET_ variables accel does not place"


# (variables, what torchrun's parser gives, a function of accel's dry run giving the same)
CASES = {
    "nproc_per_node": (
        {"PET_NPROC_PER_NODE": "3"},
        lambda a: int(a.nproc_per_node),
        lambda p: p["nproc_per_node"],
    ),
    "nnodes": ({**TWO_NODES}, lambda a: int(a.nnodes), lambda p: p["nnodes"]),
    "node_rank": (
        {**TWO_NODES, "PET_NODE_RANK": "1"},
        lambda a: int(a.node_rank),
        lambda p: p["node_rank"],
    ),
    "master_addr": (
        {**TWO_NODES},
        lambda a: f"{a.master_addr}:{a.master_port}",
        lambda p: p["rdzv"]["endpoint"],
    ),
    "rdzv_endpoint": (
        {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "10.9.8.7:29400"},
        lambda a: a.rdzv_endpoint,
        lambda p: p["rdzv"]["endpoint"],
    ),
    "rdzv_id": (
        {"PET_NNODES": "2", "PET_RDZV_ENDPOINT": "h:1", "PET_RDZV_ID": "job-7"},
        lambda a: a.rdzv_id,
        lambda p: p["rdzv"]["id"],
    ),
    "max_restarts": (
        {"PET_MAX_RESTARTS": "3"},
        lambda a: int(a.max_restarts),
        lambda p: p["max_restarts"],
    ),
    "standalone": (
        {"PET_STANDALONE": "1", "PET_NPROC_PER_NODE": "2"},
        lambda a: a.standalone,
        lambda p: p["rdzv"]["endpoint"] == "localhost:0" and p["nnodes"] == 1,
    ),
    "module": (
        {"PET_MODULE": "1"},
        lambda a: a.module,
        lambda p: "-m" in p["worker_command"],
    ),
    "no_python": (
        {"PET_NO_PYTHON": "1"},
        lambda a: a.no_python,
        lambda p: "--accel-exec" in p["worker_command"],
    ),
    "role": ({"PET_ROLE": "trainer"}, lambda a: a.role, lambda p: p["role"]),
    "tee": ({"PET_TEE": "3"}, lambda a: str(a.tee), lambda p: "3"),
    "rdzv_backend": (
        {"PET_RDZV_BACKEND": "c10d"},
        lambda a: a.rdzv_backend,
        lambda p: p["rdzv"]["backend"],
    ),
}


@pytest.mark.parametrize("dest", sorted(CASES))
def test_each_variable_means_what_it_means_to_torchrun(
    dest: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    project: Path,
) -> None:
    env, theirs, ours = CASES[dest]
    if dest == "module":  # a module the workers can import
        (project / "pkg").mkdir()
        (project / "pkg" / "__init__.py").write_text("")
        (project / "pkg" / "train.py").write_text("")
        monkeypatch.setattr(sys.modules[__name__], "SCRIPT", "pkg.train")
    if dest == "no_python":
        monkeypatch.setattr(sys.modules[__name__], "SCRIPT", sys.executable)
    expected = theirs(torchrun_args(monkeypatch, env))
    got = plan(capsys, monkeypatch, env)
    assert ours(got) == expected
    applied = {row["variable"] for row in got["from_environment"] if row["status"] == "applied"}
    assert applied == set(env)


def test_monitor_interval_is_accepted_as_torchrun_accepts_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert torchrun_args(monkeypatch, {"PET_MONITOR_INTERVAL": "5"}).monitor_interval == 5.0
    rows = plan(capsys, monkeypatch, {"PET_MONITOR_INTERVAL": "5"})["from_environment"]
    assert rows == [
        {"variable": "PET_MONITOR_INTERVAL", "value": "5", "as": "--monitor-interval",
         "status": "applied"}
    ]  # fmt: skip


def test_a_flag_typed_on_the_command_line_wins_as_under_torchrun(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.distributed.run import get_args_parser

    monkeypatch.setenv("PET_NPROC_PER_NODE", "2")
    assert get_args_parser().parse_args(["--nproc-per-node", "3", SCRIPT]).nproc_per_node == "3"
    got = plan(capsys, monkeypatch, {}, "--nproc-per-node", "3")
    assert got["nproc_per_node"] == 3
    assert got["from_environment"][0]["status"] == "the command line wins"


def test_the_variables_win_over_the_project_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, project: Path
) -> None:
    """The scheduler's shape is the job's: torchrun has no config file to outvote it."""
    assert main(["config", "set", "launch.num_processes", "4"]) == 0
    capsys.readouterr()
    assert plan(capsys, monkeypatch, {"PET_NPROC_PER_NODE": "2"})["nproc_per_node"] == 2


def test_torchx_log_dir_and_redirects_are_torchruns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TorchX's local scheduler sets PET_LOG_DIR for every job: applied as torchrun does
    (it was shown as not used until stop 55; a dry run makes no folder)."""
    logs = tmp_path / "torchx" / "logs"
    env = {"PET_LOG_DIR": str(logs), "PET_REDIRECTS": "3"}
    got = plan(capsys, monkeypatch, env)
    assert {r["variable"]: r["status"] for r in got["from_environment"]} == {
        "PET_LOG_DIR": "applied",
        "PET_REDIRECTS": "applied",
    }
    assert got["torchrun_log_dir"] == str(logs) and not logs.exists()


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"PET_NNODES": "two"}, "invalid value for PET_NNODES (torchrun's --nnodes): expected"),
        ({"PET_NODE_RANK": "first"}, "invalid PET_NODE_RANK='first' (torchrun's --node-rank)"),
        ({"PET_STANDALONE": "yes"}, "invalid PET_STANDALONE='yes': torchrun reads it as"),
        ({"PET_MASTER_PORT": "http"}, "invalid PET_MASTER_PORT='http'"),
        ({"PET_NNODES": "2"}, "--nnodes 2 needs --rdzv-endpoint"),
        ({"PET_RDZV_BACKEND": "etcd"}, "PET_RDZV_BACKEND: --rdzv-backend etcd: accel's"),
        ({"PET_NPROC_PER_NODE": "0"}, "PET_NPROC_PER_NODE: invalid value for -n/--nproc-per-node"),
        ({"PET_MAX_RESTARTS": "-1"}, "invalid value for PET_MAX_RESTARTS (torchrun's"),
    ],
)
def test_a_bad_variable_is_one_line_and_exit_2(
    env: dict[str, str],
    said: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    project: Path,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["launch", "--cpu", SCRIPT])
    _, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err
    assert not (project / ".accelerate" / "logs" / "runs").exists()


# --- two pods on loopback, with the variables the operators set -------------------------

GROW = str(SCRIPTS / "elastic_grow.py")


def pytorchjob_pod(index: int, port: int, nproc: int) -> dict[str, str]:
    """Kubeflow's PyTorchJob (training-operator v1, not elastic): the node-level
    MASTER_*/WORLD_SIZE/RANK it sets for plain scripts and the PET_* it sets for
    torchrun."""
    return {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": "2",
        "RANK": str(index),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "PET_NNODES": "2",
        "PET_NODE_RANK": str(index),
        "PET_NPROC_PER_NODE": str(nproc),
    }


def elastic_pytorchjob_pod(index: int, port: int, nproc: int) -> dict[str, str]:
    """PyTorchJob with an elasticPolicy: a c10d rendezvous at worker 0's service, the
    node range, and no node rank (each pod learns its rank at the rendezvous)."""
    return {
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"127.0.0.1:{port}",
        "PET_RDZV_ID": f"pytorchjob-{port}",
        "PET_NNODES": "2:2",
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_MAX_RESTARTS": "0",
    }


def trainjob_pod(index: int, port: int, nproc: int) -> dict[str, str]:
    """Kubeflow Trainer v2's TrainJob (the torch runtime): the node index of its
    JobSet as the node rank, and only PET_* (a TrainJob may not set these itself)."""
    return {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "JOB_COMPLETION_INDEX": str(index),
    }


def run_pods(
    command: list[str],
    out: Path,
    nproc: int,
    cwd: Path,
    pod_env: Callable[[int, int, int], dict[str, str]] | None = None,
) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Start two pods; (rank, world, all_reduce) of every worker start, and each stderr."""
    port = free_port()
    out.mkdir()
    pods = [
        subprocess.Popen(
            [*command, GROW, str(out), str(2 * nproc)],
            cwd=cwd,
            env={**os.environ, **(pod_env or pytorchjob_pod)(i, port, nproc)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [pod.communicate(timeout=150) for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0], outputs
    found = [json.loads(p.read_text()) for p in sorted(out.glob("start-*.json"))]
    return sorted((s["rank"], s["world"], s["all_reduce"]) for s in found), [e for _, e in outputs]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("nproc", [1, 2])
def test_two_pytorchjob_pods_form_one_world_as_under_torchrun(
    nproc: int, project: Path, accel_exe: list[str]
) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    theirs, _ = run_pods(torchrun, project / "torchrun", nproc, project)
    ours, said = run_pods([*accel_exe, "launch", "--cpu"], project / "accel", nproc, project)
    world = 2 * nproc
    total = float(sum(range(1, world + 1)))
    assert theirs == [(rank, world, total) for rank in range(world)]
    assert ours == theirs
    assert all("torchrun's variables: PET_NNODES=2 (--nnodes)" in err for err in said), said
    omp = f"accel: OMP_NUM_THREADS=1 for each of the {nproc} workers on this node"
    assert all((omp in err) == (nproc > 1) for err in said), said  # torchrun's default, said


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("pod", [elastic_pytorchjob_pod, trainjob_pod], ids=["elastic", "trainjob"])
def test_two_pods_of_each_kubernetes_kind_form_one_world(
    pod: Callable[[int, int, int], dict[str, str]], project: Path, accel_exe: list[str]
) -> None:
    """The operators' other two shapes, 2 pods x 1 worker, started exactly as their
    container command ``torchrun train.py`` with ``accel launch`` in its place."""
    ours, said = run_pods([*accel_exe, "launch", "--cpu"], project / "accel", 1, project, pod)
    assert ours == [(0, 2, 3.0), (1, 2, 3.0)], said
    assert all("torchrun's variables: " in err for err in said), said


def test_the_dry_run_names_the_scheduler_it_found(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sky = {"SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.5", "SKYPILOT_NODE_RANK": "1",
           "SKYPILOT_NUM_NODES": "2"}  # fmt: skip
    assert (
        plan(capsys, monkeypatch, sky)["scheduler"] == "skypilot: node 1 of 2, head 10.0.0.4:29400"
    )
    assert main(["launch", "--dry-run", "--cpu", SCRIPT]) == 0
    assert "scheduler  skypilot: node 1 of 2, head 10.0.0.4:29400" in capsys.readouterr().out
    # torchrun's variables are flags: they win over what the scheduler says
    got = plan(capsys, monkeypatch, {"PET_NODE_RANK": "0"})
    assert got["node_rank"] == 0 and got["nnodes"] == 2


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now: the rendezvous port a scheduler's
    convention fixes (the tests cannot pick a free one as they do elsewhere)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def skypilot_node(index: int, port: int, nproc: int) -> dict[str, str]:
    """SkyPilot's variables on each node of a 2-node cluster (the head on loopback)."""
    return {
        "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.1",
        "SKYPILOT_NODE_RANK": str(index),
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NUM_GPUS_PER_NODE": "0",
        "SKYPILOT_TASK_ID": f"sky-test-{port}",
    }


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_skypilot_nodes_form_one_world_with_zero_flags(
    project: Path, accel_exe: list[str]
) -> None:
    if not port_free(29400):  # SkyPilot's convention has no port: accel's default
        pytest.skip("port 29400 (the rendezvous SkyPilot jobs get) is taken on this machine")
    ours, said = run_pods(
        [*accel_exe, "launch", "--cpu"], project / "accel", 1, project, skypilot_node
    )
    assert ours == [(0, 2, 3.0), (1, 2, 3.0)]
    assert all("skypilot: node" in err and "head 127.0.0.1:29400" in err for err in said), said


def srun_task(step: int) -> Callable[[int, int, int], dict[str, str]]:
    """What ``srun -n 2`` sets in each task on a one-node allocation (step ``step``)."""

    def env(index: int, port: int, nproc: int) -> dict[str, str]:
        return {
            "SLURM_JOB_ID": "4242",
            "SLURM_NNODES": "1",
            "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "localhost",
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_ID": str(step),
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_NTASKS": "2",
            "SLURM_PROCID": str(index),
            "SLURM_LOCALID": str(index),
        }

    return env


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_srun_tasks_form_one_world_not_one_each(project: Path, accel_exe: list[str]) -> None:
    """Under srun -n 2, each task ran alone as a world of 1 and exited 0."""
    # The step whose port (29400 + step) is free here; not step 0: 29400 is the SkyPilot
    # test's, which may run beside this one (two launches on it collided under -n 2).
    step = next((step for step in range(1, 100) if port_free(29400 + step)), None)
    if step is None:
        pytest.skip("no port of 29401-29499 is free on this machine")
    ours, said = run_pods(
        [*accel_exe, "launch", "--cpu"], project / "accel", 1, project, srun_task(step)
    )
    assert ours == [(0, 2, 3.0), (1, 2, 3.0)]
    assert all("slurm: task" in err and "of 2" in err for err in said), said


def test_a_pet_value_refused_names_the_variable_not_a_flag_never_typed(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "train.py").write_text("")
    monkeypatch.setenv("PET_NNODES", "2")
    monkeypatch.setenv("PET_NODE_RANK", "2")
    assert main(["launch", "--dry-run", "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(PET_NNODES=2, PET_NODE_RANK=2 in the environment)" in err


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_an_already_started_world_of_two_runs_each_launch_as_its_rank(
    project: Path, accel_exe: list[str]
) -> None:
    """A launcher that starts every rank itself, with torch's own variables and nothing
    else: each ``accel launch`` ran its own world of 1 before."""
    out = project / "out"
    out.mkdir()
    port = str(free_port())
    ranks = [
        subprocess.Popen(
            [*accel_exe, "launch", "--cpu", str(SCRIPTS / "env_dump.py"), str(out), "--all-reduce"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "RANK": str(rank),
                "WORLD_SIZE": "2",
                "LOCAL_RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
            },
        )
        for rank in range(2)
    ]
    said = [proc.communicate(timeout=150) for proc in ranks]
    assert [proc.returncode for proc in ranks] == [0, 0], said
    dumps = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(2)]
    assert [(d["env"]["RANK"], d["env"]["WORLD_SIZE"], d["all_reduce"]) for d in dumps] == [
        ("0", "2", 3.0), ("1", "2", 3.0)
    ]  # fmt: skip
    assert [d["env"]["LOCAL_RANK"] for d in dumps] == ["0", "1"]  # as the launcher gave them
    assert all(f"world: rank {r} of 2" in err for r, (_, err) in enumerate(said)), said
