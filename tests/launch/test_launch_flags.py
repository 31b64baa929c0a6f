"""torchrun's and Hugging Face Accelerate's spellings of `accel launch` flags (dry runs)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, dry_run_json, refused

from accel.cli.main import main

SCRIPT = str(SCRIPTS / "env_dump.py")
HF_CONFIGS = Path(__file__).resolve().parent.parent / "config" / "hf_configs"


plan = dry_run_json


def shape(p: dict[str, Any]) -> tuple[int, int, int, str]:
    return p["nproc_per_node"], p["nnodes"], p["node_rank"], p["rdzv"]["endpoint"]


@pytest.mark.parametrize(
    "args",
    [
        ["--nproc_per_node", "3"],
        ["--nproc_per_node=3"],
        ["--nproc-per-node", "3"],
        ["-n", "3"],
        ["--num_processes", "3"],
        ["--num-processes=3"],
        ["--standalone", "--nproc_per_node=3"],
    ],
)
def test_processes_on_one_node(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    assert shape(plan(capsys, *args, SCRIPT)) == (3, 1, 0, "localhost:0")


def test_torchrun_counts_cpus_and_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(capsys, "--nproc-per-node", "cpu", SCRIPT)["nproc_per_node"] == os.cpu_count()
    assert plan(capsys, "--nproc_per_node=CPU", SCRIPT)["nproc_per_node"] == os.cpu_count()


def test_auto_without_a_gpu_is_one_worker_per_cpu_as_under_torchrun(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchrun's ``--nproc-per-node auto``: the GPUs where there are any, else the CPUs
    (accel read it as 1 on a CPU machine, issue 23)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides every GPU, as on this machine
    assert plan(capsys, "--nproc_per_node=auto", SCRIPT)["nproc_per_node"] == os.cpu_count()
    assert plan(capsys, "-n", "auto", SCRIPT)["nproc_per_node"] == os.cpu_count()


def test_gpu_count_without_a_gpu_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides every GPU, as on this machine
    assert "no GPU is visible" in refused(capsys, "--nproc-per-node", "gpu")


def test_torchrun_multi_node_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(
        capsys,
        *("--nnodes=2:2", "--nproc_per_node=4", "--node_rank=1"),
        *("--rdzv_backend=c10d", "--rdzv_endpoint=node0:29400", "--rdzv_id=job7"),
        *("--max_restarts=2", "--monitor_interval=5"),
        SCRIPT,
    )
    assert shape(p) == (4, 2, 1, "node0:29400")
    assert p["rdzv"]["id"] == "job7" and p["max_restarts"] == 2 and p["world_size"] == 8


def test_torchrun_elastic_node_range(capsys: pytest.CaptureFixture[str]) -> None:
    endpoint = ("--rdzv-endpoint", "node0:29400")
    p = plan(capsys, "--nnodes", "1:4", "-n", "2", *endpoint, SCRIPT)
    assert (p["min_nnodes"], p["nnodes"], p["world_size"]) == (1, 4, 8)
    assert p["config"]["launch"]["min_machines"] == 1
    # N:N and N are a fixed size, even over a config's min_machines
    (Path(".accelerate/config")).mkdir(parents=True)
    Path(".accelerate/config/accelerate_config.yaml").write_text("launch:\n  min_machines: 1\n")
    for nnodes in ("3:3", "3"):
        p = plan(capsys, "--nnodes", nnodes, *endpoint, SCRIPT)
        assert "min_nnodes" not in p and p["nnodes"] == 3
        assert p["config"]["launch"]["min_machines"] is None
    assert plan(capsys, "--nnodes", "4", *endpoint, SCRIPT)["nnodes"] == 4
    Path(".accelerate/config/accelerate_config.yaml").write_text(
        "launch:\n  min_machines: 1\n  num_machines: 2\n"
    )
    p = plan(capsys, *endpoint, SCRIPT)
    assert p["min_nnodes"] == 1 and p["nnodes"] == 2  # the config's range


def test_a_config_range_upside_down_is_refused(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    (project / ".accelerate/config").mkdir(parents=True)
    (project / ".accelerate/config/accelerate_config.yaml").write_text(
        "launch:\n  min_machines: 3\n  num_machines: 2\n  rdzv_endpoint: h:1\n"
    )
    assert "launch.min_machines 3 is more than launch.num_machines 2" in refused(capsys)


def test_torchrun_static_rendezvous_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(
        capsys,
        *("--nnodes", "2", "--node_rank", "0", "--nproc_per_node", "2"),
        *("--master_addr", "10.0.0.1", "--master_port", "29501"),
        SCRIPT,
    )
    assert shape(p) == (2, 2, 0, "10.0.0.1:29501")


def test_accelerate_spelling_means_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(
        capsys,
        *("--multi_gpu", "--num_processes", "16", "--num_machines", "2", "--machine_rank", "1"),
        *("--main_process_ip", "10.0.0.1", "--main_process_port", "29600"),
        *("--mixed_precision", "bf16", "--gpu_ids", "0,1", "--dynamo_backend", "INDUCTOR"),
        SCRIPT,
    )
    assert shape(p) == (8, 2, 1, "10.0.0.1:29600") and p["world_size"] == 16
    env = p["worker_env"]
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert env["ACCELERATE_DYNAMO_BACKEND"] == "INDUCTOR"
    assert p["config"]["launch"]["gpu_ids"] == [0, 1]
    cpu = plan(capsys, "--cpu", "--num_processes", "2", SCRIPT)
    assert cpu["worker_env"]["ACCELERATE_USE_CPU"] == "true" and cpu["nproc_per_node"] == 2


def test_a_port_on_one_node_is_not_pinned(capsys: pytest.CaptureFixture[str]) -> None:
    # `accelerate launch --main_process_port` / `torchrun --master_port` on one machine:
    # accel binds a free port instead, so two jobs on one machine never meet.
    for flags in (["--main_process_port", "29500"], ["--master_addr", "127.0.0.1"]):
        assert plan(capsys, *flags, "-n", "2", SCRIPT)["rdzv"]["endpoint"] == "localhost:0"


def test_multi_gpu_without_a_count_is_one_worker_per_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No GPU here, so `auto` is one worker; the plan says so through its config value.
    assert plan(capsys, "--multi_gpu", SCRIPT)["nproc_per_node"] == 1
    assert plan(capsys, "--multi_gpu", "-n", "2", SCRIPT)["nproc_per_node"] == 2


def test_the_scripts_own_arguments_are_never_read(capsys: pytest.CaptureFixture[str]) -> None:
    tail = ["--nproc_per_node", "9", "--num_processes=9", "--config_file", "x", "--log_dir", "y"]
    p = plan(capsys, "--nproc_per_node", "2", SCRIPT, *tail)  # read before SCRIPT only
    assert p["nproc_per_node"] == 2
    assert p["worker_command"][-len(tail) - 1 :] == [SCRIPT, *tail]


@pytest.mark.parametrize(
    ("typed", "given"),
    [
        # as torchrun (its argparse): the `--` right after the script goes, that one only;
        # accel passed it on and the script's argparse failed on `-- --lr 0.5`
        (["--", "--lr", "0.5"], ["--lr", "0.5"]),
        (["--", "--lr", "0.5", "--", "x"], ["--lr", "0.5", "--", "x"]),
        (["--lr", "--", "0.5"], ["--lr", "--", "0.5"]),
        (["--", "--"], ["--"]),
    ],
)
def test_a_separator_after_the_script_is_torchruns(
    capsys: pytest.CaptureFixture[str], typed: list[str], given: list[str]
) -> None:
    p = plan(capsys, SCRIPT, *typed)
    assert p["worker_command"][-len(given) - 1 :] == [SCRIPT, *given]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        # accepted silently, and every line of the run hidden
        (["-n", "2", "--ranks", "5"], "--ranks 5: this job has ranks 0 to 1;"),
        (["-n", "2", "--ranks", "2,3"], "--ranks 2,3: this job has ranks 0 to 1;"),
        (["-n", "2", "--local-ranks-filter", "2"], "each node has local ranks 0 to 1;"),
    ],
)
def test_a_rank_to_show_that_the_job_never_has_is_refused(
    capsys: pytest.CaptureFixture[str], args: list[str], line: str
) -> None:
    assert line in refused(capsys, *args)
    # one it has among them: shown, as torchrun's filter shows it
    assert dry_run_json(capsys, *args[:-1], "0," + args[-1], SCRIPT)["nproc_per_node"] == 2


def test_config_file_is_the_config_for_this_launch(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    hf = str(HF_CONFIGS / "multi_gpu_2nodes_rank1_c10d.yaml")
    p = plan(capsys, "--config_file", hf, SCRIPT)
    assert shape(p) == (8, 2, 1, "10.1.2.3:29500") and p["world_size"] == 16
    flags_win = plan(capsys, "--config_file", hf, "--machine_rank", "0", "-n", "2", SCRIPT)
    assert shape(flags_win) == (2, 2, 0, "10.1.2.3:29500")
    debug = plan(capsys, "--config-file", str(HF_CONFIGS / "multi_gpu_debug.yaml"), SCRIPT)
    assert debug["worker_env"]["ACCELERATE_DEBUG_MODE"] == "true"
    assert debug["nproc_per_node"] == 4 and debug["rdzv"]["endpoint"] == "localhost:0"
    assert not (project / ".accelerate").exists()  # nothing imported, nothing written


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--redirects", "4"], "invalid value for --redirects: expected 0 to 3"),
        (["-r", "0:3,1"], "invalid value for --redirects: expected 0 to 3"),
        (["--log_dir", f"{SCRIPT}/logs"], "env_dump.py is a file; give a folder"),
        (["--log-dir=.accelerate/logs"], "that is inside the workspace, where accel keeps"),
        (["--log-dir", ""], "invalid value for --log-dir: expected a folder, got ''"),
        (["--nnodes", "4:1", "--rdzv_endpoint", "h:1"], "1 <= MIN <= MAX, got '4:1'"),
        (["--nnodes", "0:2", "--rdzv_endpoint", "h:1"], "invalid value for --nnodes"),
        (["--nnodes", "1:x", "--rdzv_endpoint", "h:1"], "invalid value for --nnodes"),
        (["--nnodes", "1:2"], "--nnodes 1:2 needs --rdzv-endpoint"),
        (["--nnodes", "1:2", "--rdzv_endpoint", "h:1", "--num_processes", "4"], "is elastic"),
        (["--standalone", "--nnodes", "1:2"], "--standalone runs on one node"),
        (["--rdzv_backend", "etcd"], "accel's rendezvous is c10d"),
        (["--num_processes", "3", "--num_machines", "2", "--main_process_ip", "h"], "evenly"),
        (["-n", "2", "--num_processes", "4"], "not both"),
        (["--num_processes", "zero"], "invalid value for --num-processes"),
        (["--num_processes", "5000"], "5000 workers per node: expected an integer from 1 to"),
        (["--standalone", "--nnodes", "2"], "--standalone runs on one node"),
        (["--master_port", "70000", "--nnodes", "2"], "--master-addr/--master-port"),
        (["--fsdp_version", "1"], "accel shards with FSDP2 (fully_shard) only"),
        (["--fsdp", "--no-fsdp"], "give --fsdp or --no-fsdp, not both"),
        (["--fsdp_auto_wrap_policy", "LAMBDA"], "invalid value for --fsdp-wrap: expected one"),
        (["--fsdp-layer-classes", "a.b"], "invalid value for --fsdp-layer-classes"),
        (["--fsdp_min_num_params", "many"], "invalid value for --fsdp-min-params"),
        (["--fsdp-reshard-after-forward", "FULL_SHARD"], "invalid value for --fsdp-reshard-after"),
        (["--config_file", "missing.yaml"], "missing.yaml: no such file"),
        (["--monitor_interval", "-1"], "--monitor-interval"),
    ],
)
def test_what_accel_cannot_honour_is_refused(
    capsys: pytest.CaptureFixture[str], project: Path, args: list[str], words: str
) -> None:
    assert words in refused(capsys, *args)
    assert not (project / ".accelerate").exists()


def test_a_log_dir_in_a_moved_data_folder_is_refused(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    """``workspace.path`` moves the data folder (logs, checkpoints) out of .accelerate:
    torchrun's files may not go there either (a first version looked at .accelerate only)."""
    assert main(["config", "set", "workspace.path", str(project / "data")]) == 0
    capsys.readouterr()
    said = refused(capsys, "--dry-run", "--log-dir", "data/logs")
    assert f"--log-dir {project / 'data' / 'logs'}: that is inside the workspace" in said
    assert not (project / "data" / "logs").exists()


def fsdp_env(p: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in p["worker_env"].items() if "FSDP" in k}


def test_fsdp_flags_in_accels_and_accelerates_spelling(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    assert fsdp_env(plan(capsys, SCRIPT)) == {"ACCELERATE_USE_FSDP": "false"}
    on = {
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_VERSION": "2",
        "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP",
        "FSDP_MIN_NUM_PARAMS": "5000",
        "FSDP_RESHARD_AFTER_FORWARD": "false",
    }
    accels = plan(
        capsys,
        *("--fsdp", "--fsdp-wrap", "size", "--fsdp-min-params", "5000"),
        *("--fsdp-reshard-after-forward", "false", SCRIPT),
    )
    assert fsdp_env(accels) == on
    assert accels["config"]["launch"]["fsdp_wrap"] == "size"
    accelerates = plan(
        capsys,
        *("--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "SIZE_BASED_WRAP"),
        *("--fsdp_min_num_params", "5000", "--fsdp_reshard_after_forward", "false", SCRIPT),
    )
    # and, as accelerate launch, the FSDP variables accel's --fsdp leaves to their defaults
    assert fsdp_env(accelerates).items() >= on.items()
    assert fsdp_env(accelerates)["FSDP_SHARDING_STRATEGY"] == "FULL_SHARD"
    layers = plan(capsys, "--use_fsdp", "--fsdp_transformer_layer_cls_to_wrap", "A,B", SCRIPT)
    assert fsdp_env(layers)["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "A,B"
    # no policy on an Accelerate line: Accelerate's NO_WRAP (tests/launch/test_launch_accelerate.py)
    assert fsdp_env(layers)["FSDP_AUTO_WRAP_POLICY"] == "NO_WRAP"
    own = plan(capsys, "--fsdp", "--fsdp-layer-classes", "A,B", SCRIPT)
    assert fsdp_env(own)["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"  # accel's default
    # A flag wins over the project file, which the workers would otherwise read.
    (project / ".accelerate" / "config").mkdir(parents=True)
    (project / ".accelerate" / "config" / "accelerate_config.yaml").write_text(
        "launch:\n  fsdp: true\n"
    )
    assert fsdp_env(plan(capsys, SCRIPT))["ACCELERATE_USE_FSDP"] == "true"
    assert fsdp_env(plan(capsys, "--no-fsdp", SCRIPT)) == {"ACCELERATE_USE_FSDP": "false"}


def test_an_accelerate_fsdp_config_file_shards(capsys: pytest.CaptureFixture[str]) -> None:
    p = plan(capsys, "--config_file", str(HF_CONFIGS / "fsdp.yaml"), SCRIPT)
    assert fsdp_env(p) == {
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_VERSION": "2",
        "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "LlamaDecoderLayer",
        "FSDP_MIN_NUM_PARAMS": "100000000",
        "FSDP_RESHARD_AFTER_FORWARD": "true",
    }


def test_no_python_checks_the_program(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    assert shutil.which("echo") is not None
    p = plan(capsys, "--no-python", "-n", "2", "echo", "hi")
    assert p["worker_command"][-3:] == ["--accel-exec", "echo", "hi"]
    (project / "tool.sh").write_text("#!/bin/sh\n")  # not executable
    err = refused(capsys, "--no-python", "./tool.sh")
    assert "not an executable file" in err
    assert "no program 'no-such-tool' on PATH" in refused(capsys, "--no_python", "no-such-tool")
    assert "cannot be used together" in refused(capsys, "--no-python", "-m")


def test_help_shows_the_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    main(["launch", "--help"])
    out = capsys.readouterr().out
    assert "`_` works for `-`" in out and "--nproc_per_node" in out
    for alias in (
        "--nproc-per-node",
        "--num-processes",
        "--num-machines",
        "--machine-rank",
        "--node-rank",
        "--rdzv-endpoint",
        "--rdzv-backend",
        "--master-addr",
        "--main-process-port",
        "--mixed-precision",
        "--multi-gpu",
        "--config-file",
        "--standalone",
        "--no-python",
        "--max-restarts",
        "--monitor-interval",
        "--dynamo-backend",
    ):
        assert alias in out, alias


def _torchrun_takes_tee(value: str) -> bool:
    from torch.distributed.elastic.multiprocessing import Std

    try:
        Std.from_str(value)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "value", ["0", "1", "2", "3", "0:3,1:1", "12:3", "4", "3,", "x", "0:4", "", " 3"]
)
@pytest.mark.parametrize("flags", [("--tee", "-t"), ("--redirects", "-r")])
def test_tee_and_redirects_take_what_torchrun_takes(
    capsys: pytest.CaptureFixture[str], value: str, flags: tuple[str, str]
) -> None:
    """torchrun's ``--tee 3`` (TorchX's ``dist.ddp`` line, torchtitan's) was read as the
    script "3": a value torchrun's parser takes is taken, the rest refused in one line."""
    if _torchrun_takes_tee(value):
        for flag in flags:
            got = plan(capsys, flag, value, SCRIPT)
            assert got["worker_command"][-1] == SCRIPT and got["nproc_per_node"] == 1
    else:
        said = f"invalid value for {flags[0]}: expected 0 to 3"
        assert said in refused(capsys, flags[0], value)


def test_role_is_the_workers_role_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(capsys, SCRIPT)["role"] == "default"  # torchrun's default
    assert plan(capsys, "--role", "trainer", SCRIPT)["role"] == "trainer"
    assert plan(capsys, "--role", "", SCRIPT)["role"] == ""  # TorchX's dist.ddp passes ''


def test_port_0_on_one_node_is_a_free_port_as_under_torchrun(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """torchtitan's and TorchX's one-node lines say ``--rdzv-endpoint localhost:0``."""
    got = plan(capsys, "--rdzv-endpoint", "localhost:0", "--rdzv-id", "job-1", SCRIPT)
    assert got["rdzv"] == {"backend": "c10d", "endpoint": "localhost:0", "id": "job-1"}
    err = refused(capsys, "--nnodes", "2", "--rdzv-endpoint", "node0:0")
    assert "port 0 picks a free port, which the other nodes cannot know" in err


def test_torchtitans_line(capsys: pytest.CaptureFixture[str]) -> None:
    """torchtitan's run_train.sh, but for --local-ranks-filter (accel: --ranks)."""
    got = plan(
        capsys, "--nproc_per_node=2", "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0",
        "--role", "rank", "--tee", "3", SCRIPT, "--job.config_file", "x.toml",
    )  # fmt: skip
    assert shape(got) == (2, 1, 0, "localhost:0") and got["role"] == "rank"
    assert got["worker_command"][-3:] == [SCRIPT, "--job.config_file", "x.toml"]


def test_accelerates_cpu_threads_per_process_is_each_workers_omp_threads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``accelerate launch --num_cpu_threads_per_process N`` sets OMP_NUM_THREADS=N."""
    env = plan(capsys, "-n", "2", "--num_cpu_threads_per_process", "4", SCRIPT)["worker_env"]
    assert env["OMP_NUM_THREADS"] == "4"  # not torchrun's 1 for two workers
    both = ["--num-cpu-threads-per-process", "4", "-e", "OMP_NUM_THREADS=2", SCRIPT]
    assert plan(capsys, "-n", "2", *both)["worker_env"]["OMP_NUM_THREADS"] == "2"
    assert "0 is not in the range" in refused(capsys, "--num_cpu_threads_per_process", "0")


def test_accelerates_dynamo_and_debug_flags_reach_its_accelerator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What ``accelerate launch`` exports for them, which HF's Accelerator reads."""
    args = ["--dynamo_backend", "inductor", "--dynamo_mode", "max-autotune"]
    env = plan(capsys, *args, "--dynamo_use_fullgraph", "--debug", SCRIPT)["worker_env"]
    assert {k: v for k, v in env.items() if k.startswith("ACCELERATE_D")} == {
        "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR",
        "ACCELERATE_DYNAMO_MODE": "max-autotune",
        "ACCELERATE_DYNAMO_USE_FULLGRAPH": "True",
        "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
        "ACCELERATE_DEBUG_MODE": "true",
    }  # no ACCELERATE_DYNAMO_USE_DYNAMIC: torch.compile's own default (Accelerate 1.16)
    assert "ACCELERATE_DEBUG_MODE" not in plan(capsys, SCRIPT)["worker_env"]
    assert "invalid value for --dynamo-mode" in refused(capsys, "--dynamo-mode", "fast")


def test_a_scripts_option_given_before_the_script_says_where_it_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`accel launch --steps 10 train.py`: not launch's options that share letters."""
    line = refused(capsys, "--steps", "10")
    assert "no such option: --steps: accel launch's options go before the script" in line
    assert f"accel launch [OPTIONS] {SCRIPT} --steps ..." in line and "Possible" not in line
    assert "env_dump.py -x ..." in refused(capsys, "-n", "2", "-x")
    # a typo of launch's own option keeps click's suggestion
    assert "Possible options: --no-preload, --nproc-per-node" in refused(
        capsys, "--nproc-per-nod", "2"
    )


def test_json_without_dry_run_is_refused_not_a_run(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    # --json was ignored without --dry-run: the workers started, the output was text
    assert "add --dry-run" in refused(capsys, "--json")
    assert not (project / ".accelerate").exists()


@pytest.mark.parametrize(
    ("flag", "named"),
    [("--nnodes", "--nnodes"), ("--num-machines", "--num-machines"), ("--nnodes=", "--nnodes")],
)
def test_a_refused_value_names_the_option_as_typed(
    capsys: pytest.CaptureFixture[str], flag: str, named: str
) -> None:
    # `--nnodes 0` was answered about --num-machines, a flag the user never typed
    args = [f"{flag}0"] if flag.endswith("=") else [flag, "0"]
    assert refused(capsys, *args).startswith(f"error: invalid value for {named}: ")


def test_a_refusal_of_torchruns_variables_names_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PET_STANDALONE", "1")
    monkeypatch.setenv("PET_NNODES", "2")
    assert "(PET_NNODES=2, PET_STANDALONE=1 in the environment)" in refused(capsys)
