"""plan_launch is pure: config + request + env -> plan, tested without processes."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from torch.distributed import TCPStore  # type: ignore[attr-defined]
from torch.distributed.elastic.rendezvous import dynamic_rendezvous

from accel.config.resolve import resolve
from accel.errors import UsageError

# imported here, not in a test: on a CUDA build torch runs ldconfig on this import
from accel.launch import _torch_compat as compat
from accel.launch import agent
from accel.launch.agent import AttemptStore
from accel.launch.plan import plan_launch
from accel.launch.request import LaunchRequest, parse_env_pairs, parse_ranks
from accel.launch.schedulers import first_host, skypilot_defaults, slurm_defaults

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


def make_plan(
    tmp_path: Path,
    flags: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    gpus: int = 0,
    run_id: str = "RUN",
    **request: Any,
) -> Any:
    (tmp_path / "train.py").write_text("")
    env = env or {}
    config = resolve(project=None, user=None, env=env, flags=flags or {})
    return plan_launch(
        config,
        LaunchRequest(script=request.pop("script", "train.py"), **request),
        env=env,
        cwd=tmp_path,
        now=NOW,
        run_id=run_id,
        workspace=tmp_path / ".accelerate",
        runs_dir=tmp_path / ".accelerate/logs/runs",
        cache_dir=tmp_path / ".accelerate/cache",
        python="/usr/bin/python3",
        gpu_count=gpus,
    )


def test_single_node_defaults(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, script_args=("--lr", "0.1"))
    assert plan.nproc_per_node == 1 and plan.nnodes == 1 and plan.world_size == 1
    assert plan.rdzv_backend == "c10d" and plan.rdzv_endpoint == "localhost:0"
    assert plan.rdzv_id == "RUN" and plan.run_dir == tmp_path / ".accelerate/logs/runs/RUN"
    assert plan.worker_args[0] == "-u" and plan.worker_args[1].endswith("_bootstrap.py")
    assert plan.worker_args[2:] == ("train.py", "--lr", "0.1")
    env = plan.worker_env
    assert env["ACCEL_WORKSPACE"] == str(tmp_path / ".accelerate")
    assert env["ACCEL_RUN_ID"] == "RUN" and env["ACCEL_RUN_NAME"] == "default"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["ACCELERATE_MIXED_PRECISION"] == "no" and env["ACCELERATE_USE_CPU"] == "true"
    assert "OMP_NUM_THREADS" not in env  # torchrun sets it only for more than one worker
    assert "ACCELERATE_DYNAMO_BACKEND" not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"].endswith("cache/frameworks/inductor")


def test_flags_and_env(tmp_path: Path) -> None:
    plan = make_plan(
        tmp_path,
        flags={
            "launch.num_processes": "2",
            "launch.mixed_precision": "bf16",
            "launch.dynamo_backend": "inductor",
            "launch.gpu_ids": "0,1",
            "launch.run_name": "exp1",
            "launch.env": "A=1,B=2",
        },
        gpus=2,
        extra_env={"B": "3"},
    )
    env = plan.worker_env
    assert plan.nproc_per_node == 2 and env["OMP_NUM_THREADS"] == "1"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["ACCELERATE_USE_CPU"] == "false"
    assert env["ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["ACCEL_RUN_NAME"] == "exp1" and plan.run_name == "exp1"
    assert env["A"] == "1" and env["B"] == "3"


@pytest.mark.parametrize(
    ("flags", "env", "series"),
    [
        # exported in the shell, as a script under torchrun reads it: was ignored, and the
        # run resumed from (and saved into) the series 'default' of another experiment
        ({}, {"ACCEL_RUN_NAME": "exp-42"}, "exp-42"),
        ({}, {"ACCEL_RUN_NAME": "exp-42", "ACCEL_LAUNCH_RUN_NAME": "other"}, "exp-42"),
        ({"launch.run_name": "flag"}, {"ACCEL_RUN_NAME": "exp-42"}, "flag"),  # the flag wins
        ({}, {"ACCEL_RUN_NAME": ""}, "default"),  # set but empty: the worker API's rule
    ],
)
def test_the_series_exported_in_the_shell_is_the_series_of_the_run(
    tmp_path: Path, flags: dict[str, Any], env: dict[str, str], series: str
) -> None:
    plan = make_plan(tmp_path, flags, env=env)
    assert plan.run_name == series and plan.worker_env["ACCEL_RUN_NAME"] == series


def test_an_exported_series_name_that_cannot_be_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="invalid run name 'my exp' for a checkpoint series"):
        make_plan(tmp_path, env={"ACCEL_RUN_NAME": "my exp"})


def test_user_omp_threads_are_kept(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, {"launch.num_processes": 2}, env={"OMP_NUM_THREADS": "4"})
    assert "OMP_NUM_THREADS" not in plan.worker_env  # inherited from the launcher as is


def test_the_omp_default_is_said_in_one_line_as_torchrun_says_it(tmp_path: Path) -> None:
    (said,) = make_plan(tmp_path, {"launch.num_processes": 2}).notes
    assert said.startswith("OMP_NUM_THREADS=1 for each of the 2 workers") and "tune" in said
    assert make_plan(tmp_path, {"launch.num_processes": 1}).notes == ()
    assert (
        make_plan(tmp_path, {"launch.num_processes": 2}, env={"OMP_NUM_THREADS": "4"}).notes == ()
    )
    chosen = make_plan(tmp_path, {"launch.num_processes": 2, "launch.env": "OMP_NUM_THREADS=8"})
    assert chosen.worker_env["OMP_NUM_THREADS"] == "8" and chosen.notes == ()


def test_auto_processes(tmp_path: Path) -> None:
    assert make_plan(tmp_path, {"launch.num_processes": "auto"}, gpus=3).nproc_per_node == 3
    assert make_plan(tmp_path, {"launch.num_processes": "auto"}, gpus=0).nproc_per_node == 1
    chosen = {"launch.num_processes": "auto", "launch.gpu_ids": "1,3"}
    assert make_plan(tmp_path, chosen, gpus=4).nproc_per_node == 2  # one per chosen GPU


@pytest.mark.parametrize(
    ("flags", "gpus", "message"),
    [
        ({"launch.num_processes": 2}, 1, "2 workers need a GPU each but 1 GPU is visible"),
        ({"launch.num_processes": 9}, 8, "9 workers need a GPU each but 8 GPUs are visible"),
        ({"launch.num_processes": 3, "launch.gpu_ids": "0,1"}, 4, "--gpu-ids names 2"),
        ({"launch.gpu_ids": "0,5"}, 4, "--gpu-ids asks for GPU 5 but 4 GPUs are visible"),
    ],
)
def test_more_workers_than_gpus_is_refused_before_anything_starts(
    tmp_path: Path, flags: dict[str, Any], gpus: int, message: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as caught:
        make_plan(tmp_path, flags, gpus=gpus)
    assert "--cpu" in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "gpus"),
    [
        ({"launch.num_processes": 2}, 0),  # no GPU: two CPU workers
        ({"launch.num_processes": 2, "launch.use_cpu": True}, 1),
        ({"launch.num_processes": 2}, 2),
    ],
)
def test_workers_that_fit_the_gpus_or_the_cpu_are_planned(
    tmp_path: Path, flags: dict[str, Any], gpus: int
) -> None:
    assert make_plan(tmp_path, flags, gpus=gpus).nproc_per_node == 2


def _package(root: Path, name: str = "pkg") -> Path:
    """A package whose ``__init__`` leaves a marker when it runs (the launcher must not)."""
    (root / name).mkdir(parents=True)
    marker = root / f"{name}-imported"
    (root / name / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (root / name / "train.py").write_text("")
    return marker


def test_module_mode(tmp_path: Path) -> None:
    marker = _package(tmp_path)
    plan = make_plan(tmp_path, script="pkg.train", module=True)
    assert plan.worker_args[2:] == ("-m", "pkg.train")
    assert not marker.exists()  # looked up, not imported
    with pytest.raises(UsageError, match="module name"):
        make_plan(tmp_path, script="not a module", module=True)


def test_a_missing_module_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as refused:
        make_plan(tmp_path, script="trian", module=True)  # make_plan writes train.py
    assert str(refused.value) == (
        f"-m trian: no module 'trian' in {tmp_path} or on the workers' sys.path; "
        "did you mean -m train? (a script is launched without -m)"
    )
    with pytest.raises(UsageError, match="no module 'nothing_close_zq'") as far:
        make_plan(tmp_path, script="nothing_close_zq.train", module=True)
    assert "did you mean" not in str(far.value)
    with pytest.raises(
        UsageError, match=r"'train' is a module, not a package; did you mean -m train\?"
    ):
        make_plan(tmp_path, script="train.py", module=True)
    assert make_plan(tmp_path, script="train", module=True).worker_args[2:] == ("-m", "train")
    assert make_plan(tmp_path, script="json.tool", module=True)  # the interpreter's own


def test_the_module_is_looked_up_on_the_workers_pythonpath(tmp_path: Path) -> None:
    marker = _package(tmp_path / "src", "srcpkg")
    with pytest.raises(UsageError, match="no module 'srcpkg'"):
        make_plan(tmp_path, script="srcpkg.train", module=True)
    for flags, env, extra in (
        ({}, {"PYTHONPATH": "src"}, {}),  # the launcher's environment, read from cwd
        ({"launch.env": {"PYTHONPATH": str(tmp_path / "src")}}, {}, {}),
        ({}, {}, {"PYTHONPATH": "src"}),  # --env
    ):
        plan = make_plan(tmp_path, flags, env, script="srcpkg.train", module=True, extra_env=extra)
        assert plan.worker_args[2:] == ("-m", "srcpkg.train")
    assert not marker.exists()
    assert str(tmp_path / "src") not in sys.path  # the launcher's own path is as it was


def test_missing_script(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^no such script: nope.py \(run from .*\)$"):
        make_plan(tmp_path, script="nope.py")  # nothing near: no guess
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "prep.py").write_text("")
    with pytest.raises(UsageError, match=r"; did you mean tools/prep.py\?$"):
        make_plan(tmp_path, script="tools/Prep.py")


@pytest.mark.parametrize(
    ("script", "args", "said"),
    [
        # `python train.py` typed after `accel launch`, as one starts a script by hand
        (
            "python",
            ("train.py", "--lr", "1"),
            "no such script: python (run from {cwd}); "
            "drop 'python', accel starts the script with Python itself (accel launch [OPTIONS] "
            "train.py)",
        ),
        ("python3.11", ("-u", "train.py"), "drop 'python3.11', accel starts the script"),
        # another launcher's line with `accel launch` put before it, its secrets hidden
        (
            "torchrun",
            ("--nproc-per-node", "2", "train.py", "--hf-token", "hf_abc123", "--lr", "1e-4"),
            "no such script: torchrun (run from {cwd}); drop 'torchrun', accel launch takes "
            "its flags itself (accel launch --nproc-per-node 2 train.py --hf-token '***' --lr "
            "1e-4)",
        ),
        ("accelerate", ("launch", "train.py"), "drop 'accelerate launch', accel launch takes"),
        ("accel", ("launch", "-n", "2", "x y.py"), "(accel launch -n 2 'x y.py')"),
        (
            "python3",
            ("-m", "torch.distributed.launch", "--use_env", "main.py"),
            "drop 'python3 -m torch.distributed.launch', accel launch takes its flags itself "
            "(accel launch --use_env main.py)",
        ),
        ("torchrun", (), "drop 'torchrun', accel launch takes its flags itself (accel launch "),
        ("train", (), "no such script: train (run from {cwd}); did you mean train.py?"),
        ("Train.py", (), "no such script: Train.py (run from {cwd}); did you mean train.py?"),
        ("trian.py", ("--lr", "1"), "; did you mean train.py?"),
        # an interpreter given by its path exists: python stopped on its null bytes
        (
            sys.executable,
            ("train.py",),
            f"{sys.executable} is a program, not a Python script; "
            f"drop '{Path(sys.executable).name}', accel starts the script with Python itself",
        ),
    ],
)
def test_a_command_line_that_names_no_script_says_what_it_meant(
    tmp_path: Path, script: str, args: tuple[str, ...], said: str
) -> None:
    with pytest.raises(UsageError) as refused:
        make_plan(tmp_path, script=script, script_args=args)
    assert said.format(cwd=tmp_path) in str(refused.value), refused.value


def test_a_program_is_refused_with_no_python_named(tmp_path: Path) -> None:
    program = shutil.which("ls") or "/bin/ls"
    with pytest.raises(UsageError) as refused:
        make_plan(tmp_path, script=program)
    assert str(refused.value) == (
        f"{program} is a program, not a Python script; give the Python script, or "
        f"--no-python to start {program} itself"
    )
    plan = make_plan(tmp_path, script=program, no_python=True)  # as it says
    assert program in plan.worker_args


def test_multi_node(tmp_path: Path) -> None:
    flags = {
        "launch.num_machines": 2,
        "launch.machine_rank": 1,
        "launch.rdzv_endpoint": "10.0.0.1",
        "launch.num_processes": 2,
    }
    plan = make_plan(tmp_path, flags)
    assert plan.nnodes == 2 and plan.node_rank == 1 and plan.world_size == 4
    assert plan.rdzv_endpoint == "10.0.0.1:29400" and plan.rdzv_id == "accel"
    assert plan.rdzv_is_host is False
    flags["launch.machine_rank"] = 0
    assert make_plan(tmp_path, flags).rdzv_is_host is True
    del flags["launch.machine_rank"]  # torchrun's c10d lines: torch decides, as there
    assert make_plan(tmp_path, flags).rdzv_is_host is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"launch.num_machines": 2}, "needs --rdzv-endpoint"),
        (
            {"launch.num_machines": 2, "launch.machine_rank": 2, "launch.rdzv_endpoint": "h:1"},
            "out of range",
        ),
    ],
)
def test_bad_nodes(tmp_path: Path, flags: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        make_plan(tmp_path, flags)


def test_a_refusal_names_the_endpoint_where_it_was_given(tmp_path: Path) -> None:
    # `accel config import` of a cluster's config on a laptop was told to fix an
    # `--rdzv-endpoint 10.0.0.1:29500` nobody typed; so were SLURM's and the variable's
    from accel.config.resolve import ConfigLayer
    from accel.launch.rendezvous import Timing, check_hosted_here, check_resolves

    two = {"launch.num_machines": 2, "launch.machine_rank": 1}
    config_file = tmp_path / ".accelerate/config/accelerate_config.yaml"
    layer = ConfigLayer(
        "project", config_file, {"launch.rdzv_endpoint": "head.invalid:29500"},
        {"launch.rdzv_endpoint": 4},
    )  # fmt: skip
    (tmp_path / "train.py").write_text("")
    plans = {
        "flag": make_plan(tmp_path, {**two, "launch.rdzv_endpoint": "head.invalid:29500"}),
        "env": make_plan(tmp_path, two, env={"ACCEL_LAUNCH_RDZV_ENDPOINT": "head.invalid:29500"}),
        "file": plan_launch(
            resolve(project=layer, user=None, env={}, flags=two),
            LaunchRequest(script="train.py"), env={}, cwd=tmp_path, now=NOW, run_id="RUN",
            workspace=tmp_path / ".accelerate", runs_dir=tmp_path / "runs",
            cache_dir=tmp_path / "cache", python="/usr/bin/python3", gpu_count=0,
        ),
        "main": make_plan(tmp_path, two, main_endpoint="head.invalid:29500"),
        "slurm": make_plan(tmp_path, env={**SLURM, "SLURM_JOB_NODELIST": "head.invalid"}),
    }  # fmt: skip
    assert {how: plan.rdzv_named for how, plan in plans.items()} == {
        "flag": "--rdzv-endpoint head.invalid:29500",
        "env": "ACCEL_LAUNCH_RDZV_ENDPOINT=head.invalid:29500",
        "file": f"launch.rdzv_endpoint head.invalid:29500 in {config_file}:4",
        "main": "--master-addr/--master-port head.invalid:29500",
        "slurm": "head.invalid:29400, the first host of SLURM_JOB_NODELIST",
    }
    file = plans["file"]
    with pytest.raises(UsageError) as refused:
        check_resolves(file.rdzv_endpoint, file.rdzv_named)
    assert str(refused.value).startswith(
        f"the rendezvous host 'head.invalid' (launch.rdzv_endpoint head.invalid:29500 in "
        f"{config_file}:4) does not resolve ("
    )
    with pytest.raises(UsageError) as refused:
        check_hosted_here("192.0.2.1:29500", Timing(connect_timeout=0.5), file.rdzv_named)
    assert str(refused.value).startswith(
        f"launch.rdzv_endpoint head.invalid:29500 in {config_file}:4: this is node 0"
    )
    with pytest.raises(UsageError, match=r"^ACCEL_LAUNCH_RDZV_ENDPOINT=h:0: port 0 picks"):
        make_plan(tmp_path, {"launch.num_machines": 2}, env={"ACCEL_LAUNCH_RDZV_ENDPOINT": "h:0"})


SLURM = {
    "SLURM_JOB_ID": "42",
    "SLURM_NNODES": "3",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu[07-09],cpu1",
}


def test_slurm_fills_in_what_was_not_given(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, env=SLURM)
    assert (plan.nnodes, plan.node_rank) == (3, 2)
    assert plan.rdzv_endpoint == "gpu07:29400" and plan.rdzv_id == "slurm-42"
    plan = make_plan(tmp_path, {"launch.rdzv_endpoint": "head:1234"}, env=SLURM)
    assert plan.rdzv_endpoint == "head:1234"


def test_slurm_steps_side_by_side_never_share_a_rendezvous(tmp_path: Path) -> None:
    """Two launches in one allocation collided on localhost:29400, id slurm-<job>."""
    one_node = {"SLURM_JOB_ID": "42", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
                "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_ID": "0"}  # fmt: skip
    first = make_plan(tmp_path, env=one_node, run_id="r1")
    second = make_plan(tmp_path, env=one_node, run_id="r2")
    assert first.rdzv_endpoint == second.rdzv_endpoint == "localhost:0"  # a free port each
    assert first.rdzv_id != second.rdzv_id
    steps = [make_plan(tmp_path, env={**SLURM, "SLURM_STEP_ID": str(i)}) for i in (0, 1)]
    assert [s.rdzv_endpoint for s in steps] == ["gpu07:29400", "gpu07:29401"]
    assert [s.rdzv_id for s in steps] == ["slurm-42.0", "slurm-42.1"]


# What srun -n 4 sets in task 3 on a 2-node allocation (one task per GPU).
SRUN_TASK = {
    "SLURM_JOB_ID": "77",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "SLURM_STEP_NODELIST": "gpu[01-02]",
    "SLURM_STEP_ID": "3",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_NTASKS": "4",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
}


def test_srun_with_a_task_per_gpu_makes_each_task_one_worker(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, {"launch.use_cpu": True}, env=SRUN_TASK)
    assert (plan.nnodes, plan.node_rank, plan.nproc_per_node, plan.world_size) == (4, 3, 1, 4)
    assert plan.rdzv_endpoint == "gpu01:29403" and plan.rdzv_id == "slurm-77.3"
    assert plan.scheduler == "slurm: task 3 of 4, head gpu01:29403, 1 worker(s) per task"
    # The agent numbers its one worker 0; the worker keeps SLURM's local rank (_bootstrap).
    assert plan.worker_env["ACCEL_LOCAL_RANK"] == "1"


def test_the_batch_script_of_a_many_task_job_is_not_one_of_its_tasks(tmp_path: Path) -> None:
    """sbatch --ntasks=4 on one node: the script itself runs once, with the job's count."""
    batch = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
             "SLURM_JOB_NODELIST": "gpu01", "SLURM_NTASKS": "4",
             "SLURM_STEP_ID": str(0xFFFFFFFE)}  # fmt: skip
    plan = make_plan(tmp_path, env=batch)
    assert (plan.nnodes, plan.world_size, plan.rdzv_endpoint) == (1, 1, "localhost:0")


# SkyPilot's variables on node 1 of a 2-node cluster with 4 GPUs a node (its docs' names).
SKYPILOT = {
    "SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.5\n",
    "SKYPILOT_NODE_RANK": "1",
    "SKYPILOT_NUM_NODES": "2",
    "SKYPILOT_NUM_GPUS_PER_NODE": "4",
    "SKYPILOT_TASK_ID": "sky-2026-12-01-abc_1",
}


def test_skypilot_gives_the_job_with_zero_flags(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, {"launch.use_cpu": True}, env=SKYPILOT)
    assert (plan.nnodes, plan.node_rank, plan.nproc_per_node) == (2, 1, 4)
    assert (
        plan.rdzv_endpoint == "10.0.0.4:29400" and plan.rdzv_id == "skypilot-sky-2026-12-01-abc_1"
    )
    assert plan.scheduler == "skypilot: node 1 of 2, head 10.0.0.4:29400, 4 worker(s) per node"
    assert plan.notes[0] == plan.scheduler  # said when the run starts
    given = make_plan(tmp_path, {"launch.use_cpu": True, "launch.num_processes": 2}, env=SKYPILOT)
    assert given.nproc_per_node == 2  # what the user set wins


def test_a_skypilot_cluster_of_one_or_a_cpu_node_asks_nothing_more(tmp_path: Path) -> None:
    one = {"SKYPILOT_NODE_IPS": "10.0.0.4", "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "1"}
    plan = make_plan(tmp_path, env={**one, "SKYPILOT_NUM_GPUS_PER_NODE": "0"})
    assert (plan.nnodes, plan.nproc_per_node, plan.rdzv_endpoint) == (1, 1, "localhost:0")
    assert skypilot_defaults({"SKYPILOT_NODE_RANK": "0"}) == {}  # no IPs: not SkyPilot's job


def test_a_scheduler_rank_beyond_its_nodes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="out of range"):
        make_plan(tmp_path, env={**SKYPILOT, "SKYPILOT_NODE_RANK": "2"})


def test_slurm_is_described_as_dry_run_shows_it(tmp_path: Path) -> None:
    assert make_plan(tmp_path, env=SLURM).scheduler == "slurm: node 2 of 3, head gpu07:29400"
    assert make_plan(tmp_path).scheduler is None


def test_a_given_rendezvous_is_described_not_the_head_the_scheduler_names(
    tmp_path: Path,
) -> None:
    # The line named the scheduler's head while the nodes met at --rdzv-endpoint: the
    # user checking a hang looked at the wrong host.
    plan = make_plan(tmp_path, {"launch.rdzv_endpoint": "10.0.0.9:29500"}, env=SLURM)
    assert plan.rdzv_endpoint == "10.0.0.9:29500"
    said = "slurm: node 2 of 3, rendezvous 10.0.0.9:29500 (given; not its head gpu07:29400)"
    assert plan.scheduler == said and said in plan.notes


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [
        ("n1", "n1"),
        ("n1,n2", "n1"),
        ("gpu[07-09,12]", "gpu07"),
        ("gpu[07-09,12],cpu1", "gpu07"),
        ("a-b[3,5]x", "a-b3x"),
        ("node[001-004]", "node001"),
        # two bracket groups (issue 29): the first host of each
        ("rack1-[3-4]-n[1-2]", "rack1-3-n1"),
        ("n[1-2]-gpu[01-02],x", "n1-gpu01"),
    ],
)
def test_first_host(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_first_host_is_scontrols() -> None:
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        pytest.skip("SLURM's scontrol is not installed (apt-get install slurm-wlm)")
    conf = Path(__file__).parent / "scripts" / "scontrol_only.conf"
    # slurm 22.05 takes no suffix after a bracket group: a-b[3,5]x is left out
    for nodelist in [
        "gpu[07-09,12],cpu1",
        "node[001-004]",
        "rack1-[3-4]-n[1-2]",
        "n[1-2]-g[01-02],x",
    ]:
        said = subprocess.run(
            [scontrol, "show", "hostnames", nodelist], capture_output=True, text=True,
            env={**os.environ, "SLURM_CONF": str(conf)}, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert first_host(nodelist) == said.split()[0], nodelist


@pytest.mark.parametrize("nodelist", ["", ",n1", "[1-2]", "n[1-2", "n[1-[2]]"])
def test_a_node_list_that_cannot_be_read_is_one_line(nodelist: str) -> None:
    with pytest.raises(UsageError, match="cannot read the SLURM node list"):
        first_host(nodelist)


# What a launcher that starts every rank itself sets (a custom one, Azure ML, mpirun
# wrappers): torch's own variables, rank 1 of 2 here.
STARTED_WORLD = {
    "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
    "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "29510",
}  # fmt: skip


def test_in_a_started_world_the_launch_runs_as_the_rank_it_was_given(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, {"launch.use_cpu": True}, env=STARTED_WORLD)
    assert (plan.nnodes, plan.node_rank, plan.nproc_per_node, plan.world_size) == (2, 1, 1, 2)
    assert (plan.rdzv_endpoint, plan.rdzv_id) == ("10.0.0.4:29510", "world-29510")
    assert plan.scheduler == "world: rank 1 of 2, head 10.0.0.4:29510, 1 worker(s) per rank"
    assert plan.worker_env["ACCEL_LOCAL_RANK"] == "1"
    # Flags still win: -n 2 makes this "rank" a node of two workers, and no local rank.
    plan = make_plan(tmp_path, {"launch.use_cpu": True, "launch.num_processes": 2},
                     env=STARTED_WORLD)  # fmt: skip
    assert (plan.nproc_per_node, plan.world_size) == (2, 4)
    assert "ACCEL_LOCAL_RANK" not in plan.worker_env


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 in the environment is not below WORLD_SIZE=2"),
        ({"RANK": "one"}, "are not all numbers"),
    ],
)
def test_a_started_world_that_makes_no_sense_is_one_line(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    with pytest.raises(UsageError, match=words):
        make_plan(tmp_path, env={**STARTED_WORLD, **env})


def test_a_worker_of_torchrun_or_accel_is_not_a_started_world(tmp_path: Path) -> None:
    """Every worker sees the four variables: a launch from inside one is a launch of its own."""
    plan = make_plan(tmp_path, env={**STARTED_WORLD, "TORCHELASTIC_RUN_ID": "x"})
    assert (plan.nnodes, plan.world_size, plan.scheduler) == (1, 1, None)
    partial = {k: v for k, v in STARTED_WORLD.items() if k != "RANK"}  # batch scripts' exports
    assert make_plan(tmp_path, env=partial).scheduler is None
    # A PyTorchJob pod: node-level RANK/WORLD_SIZE beside the PET_* that say the job.
    assert make_plan(tmp_path, env={**STARTED_WORLD, "PET_NNODES": "2"}).scheduler is None


def test_no_slurm() -> None:
    assert slurm_defaults({}) == {}


def test_env_pairs_and_ranks() -> None:
    assert parse_env_pairs(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    for bad in (["A"], ["1A=2"], ["ACCEL_RUN_ID=x"]):
        with pytest.raises(UsageError):
            parse_env_pairs(bad)
    assert parse_ranks(None) is None and parse_ranks("all") is None
    assert parse_ranks("0,2") == {0, 2}
    with pytest.raises(UsageError):
        parse_ranks("x")


@pytest.mark.parametrize(
    ("env", "flags", "words"),
    [
        ({**SLURM, "SLURM_NODEID": "3"}, {},
         "SLURM_NODEID=3 (slurm) is out of range for SLURM_NNODES=3 (slurm) (expected 0 to 2)"),
        (SLURM, {"launch.machine_rank": 3},
         "--node-rank 3 is out of range for SLURM_NNODES=3 (slurm)"),
        ({**SKYPILOT, "SKYPILOT_NODE_RANK": "2"}, {},
         "SKYPILOT_NODE_RANK=2 (skypilot) is out of range for SKYPILOT_NUM_NODES=2 (skypilot)"),
    ],
)  # fmt: skip
def test_a_node_rank_a_scheduler_gave_out_of_range_names_its_variable(
    tmp_path: Path, env: dict[str, str], flags: dict[str, Any], words: str
) -> None:
    """The user typed none of it: the line names what to check, not a flag never given."""
    with pytest.raises(UsageError, match=re.escape(words)):
        make_plan(tmp_path, flags, env=env)


@pytest.mark.parametrize(("nodes", "skips"), [(1, True), (2, False)])
def test_only_a_one_node_jobs_rendezvous_skips_torchs_join_skew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int, skips: bool
) -> None:
    monkeypatch.setattr(agent.registry, "get_rendezvous_handler", lambda params: params)
    monkeypatch.setattr(compat, "_one_node", not skips)
    monkeypatch.setattr(dynamic_rendezvous, "_delay", dynamic_rendezvous._delay)
    flags = {"launch.num_machines": nodes, "launch.machine_rank": 0}
    flags["launch.rdzv_endpoint"] = "10.0.0.1"
    params = agent.rendezvous_handler(make_plan(tmp_path, flags), 30.0)
    assert params.max_nodes == nodes
    assert compat._one_node is skips


def _torch_envs(use_agent_store: str, port: str = "29500") -> dict[int, dict[str, str]]:
    """What torch's agent hands its LogsSpecs: one environment per local worker."""
    return {
        local: {
            "RANK": str(local), "WORLD_SIZE": "2", "MASTER_ADDR": "localhost",
            "MASTER_PORT": port, "TORCHELASTIC_USE_AGENT_STORE": use_agent_store,
        }
        for local in (0, 1)
    }  # fmt: skip


def test_each_attempt_of_a_restartable_job_gets_a_fresh_listening_store() -> None:
    stores = AttemptStore()
    first = _torch_envs("False")
    stores.place(first)
    port = int(first[0]["MASTER_PORT"])
    assert [env["MASTER_PORT"] for env in first.values()] == [str(port)] * 2
    assert {env["TORCHELASTIC_USE_AGENT_STORE"] for env in first.values()} == {"True"}
    client = TCPStore("localhost", port, is_master=False, wait_for_workers=False)
    client.set("key", "value")  # listening, and a store
    assert client.get("key") == b"value"
    del client
    second = _torch_envs("False")
    stores.place(second)
    assert int(second[0]["MASTER_PORT"]) != port
    with pytest.raises(ConnectionRefusedError):  # the last attempt's is closed
        socket.create_connection(("localhost", port), timeout=10).close()


def test_the_agents_shared_store_is_left_as_torch_gives_it() -> None:
    shared = _torch_envs("True", port="29411")
    AttemptStore().place(shared)
    assert shared == _torch_envs("True", port="29411")
    AttemptStore().place({})
