"""`accel config import`: Hugging Face Accelerate configs, with Accelerate's meaning.

The corpus in hf_configs/ was written by Accelerate's own writer (make_corpus.py), plus
files in the formats of older releases and hand edits people make.
"""

from __future__ import annotations

import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from accel.config import project as config_project
from accel.config.hf_import import map_hf_config
from accel.config.resolve import resolve
from accel.config.yamlio import load_yaml_file
from accel.errors import ConfigError
from accel.launch.plan import plan_launch
from accel.launch.request import LaunchRequest
from accel.workspace import Workspace

CORPUS = Path(__file__).resolve().parent / "hf_configs"
# Every distributed_type of Accelerate's DistributedType, and SageMaker's.
DISTRIBUTED_TYPES = {
    "NO",
    "MULTI_CPU",
    "MULTI_GPU",
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_XPU",
    "MULTI_HPU",
    "MULTI_NEURON",
    "DEEPSPEED",
    "FSDP",
    "XLA",
    "MEGATRON_LM",
    "DATA_PARALLEL",
}
ONE = {"launch.num_machines": 1, "launch.machine_rank": 0, "launch.rdzv_endpoint": None}
GPU = {"launch.mixed_precision": "no", "launch.use_cpu": False}
TWO_NODES = {"launch.num_machines": 2, "launch.rdzv_endpoint": "10.1.2.3:29500"}

# file -> (accel values, notes) or the refusal's words
EXPECTED: dict[str, tuple[dict[str, Any], list[str]] | str] = {
    "default_cpu.yaml": (
        {"launch.num_processes": 1, **ONE, "launch.mixed_precision": "no", "launch.use_cpu": True},
        [],
    ),
    "default_4gpu.yaml": ({"launch.num_processes": 4, **ONE, **GPU}, []),
    "no_cpu.yaml": (
        {"launch.num_processes": 1, **ONE, "launch.mixed_precision": "no", "launch.use_cpu": True},
        [],
    ),
    "no_gpu_fp16.yaml": (
        {
            "launch.num_processes": 1,
            **ONE,
            "launch.mixed_precision": "fp16",
            "launch.use_cpu": False,
            "launch.gpu_ids": "all",
        },
        [],
    ),
    "multi_gpu_2.yaml": ({"launch.num_processes": 2, **ONE, **GPU, "launch.gpu_ids": "all"}, []),
    "multi_gpu_ids_bf16.yaml": (
        {
            "launch.num_processes": 2,
            **ONE,
            "launch.mixed_precision": "bf16",
            "launch.use_cpu": False,
            "launch.gpu_ids": [0, 1],
        },
        [],
    ),
    "multi_gpu_2nodes_rank0.yaml": (
        {
            "launch.num_processes": 8,
            **TWO_NODES,
            "launch.machine_rank": 0,
            **GPU,
            "launch.gpu_ids": "all",
        },
        [],
    ),
    "multi_gpu_2nodes_rank1_c10d.yaml": (
        {
            "launch.num_processes": 8,
            **TWO_NODES,
            "launch.machine_rank": 1,
            **GPU,
            "launch.gpu_ids": "all",
        },
        [],
    ),
    "multi_gpu_2nodes_odd.yaml": "num_processes 3 is the total over num_machines 2",
    "multi_gpu_2nodes_etcd.yaml": "rdzv_backend etcd",
    "multi_gpu_debug.yaml": (
        {
            "launch.num_processes": 4,
            **ONE,
            **GPU,
            "launch.env": {"ACCELERATE_DEBUG_MODE": "true"},
        },
        [],
    ),
    "multi_gpu_dynamo.yaml": (
        {
            "launch.num_processes": 2,
            **ONE,
            **GPU,
            "launch.dynamo_backend": "inductor",
            "launch.env": {
                "ACCELERATE_DYNAMO_MODE": "max-autotune",
                "ACCELERATE_DYNAMO_USE_DYNAMIC": "True",
                "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False",
                "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
            },
        },
        [],
    ),
    "multi_gpu_affinity.yaml": (
        {"launch.num_processes": 2, **ONE, **GPU, "launch.gpu_ids": "all"},
        ["enable_cpu_affinity: not used"],
    ),
    "multi_gpu_fp8.yaml": "mixed_precision: expected one of no, fp16, bf16, got 'fp8'",
    "multi_cpu_4.yaml": (
        {"launch.num_processes": 4, **ONE, "launch.mixed_precision": "no", "launch.use_cpu": True},
        [],
    ),
    "multi_cpu_mpi.yaml": (
        {
            "launch.num_processes": 4,
            "launch.num_machines": 4,
            "launch.machine_rank": 0,
            "launch.rdzv_endpoint": "10.1.2.3:29500",
            "launch.mixed_precision": "no",
            "launch.use_cpu": True,
        },
        ["mpirun_config: not used: accel does not start the other machines"],
    ),
    "multi_npu.yaml": "distributed_type MULTI_NPU: accel launches CPU and CUDA workers only",
    "multi_mlu.yaml": "distributed_type MULTI_MLU: accel launches CPU and CUDA workers only",
    "multi_sdaa.yaml": "distributed_type MULTI_SDAA: accel launches CPU and CUDA workers only",
    "multi_musa.yaml": "distributed_type MULTI_MUSA: accel launches CPU and CUDA workers only",
    "multi_xpu.yaml": "distributed_type MULTI_XPU: accel launches CPU and CUDA workers only",
    "multi_hpu.yaml": "distributed_type MULTI_HPU: accel launches CPU and CUDA workers only",
    "multi_neuron.yaml": "distributed_type MULTI_NEURON: accel launches CPU and CUDA workers only",
    "deepspeed.yaml": "distributed_type DEEPSPEED: DeepSpeed training is not supported",
    "fsdp.yaml": (
        {
            "launch.num_processes": 4,
            **ONE,
            **GPU,
            "launch.fsdp": True,
            "launch.fsdp_wrap": "transformer",
            "launch.fsdp_layer_classes": ["LlamaDecoderLayer"],
            "launch.fsdp_reshard_after_forward": True,
        },
        ["fsdp_config.fsdp_cpu_ram_efficient_loading: not used"],
    ),
    "megatron_lm.yaml": "distributed_type MEGATRON_LM: Megatron-LM training is not supported",
    "xla_tpu.yaml": "distributed_type XLA: TPU (XLA) training is not supported",
    "sagemaker.yaml": "compute_environment AMAZON_SAGEMAKER: accel launches on this machine only",
    "legacy_0_11.yaml": (
        {"launch.num_processes": 1, **ONE, **GPU},
        [],
    ),
    "legacy_0_12_multi_gpu.yaml": (
        {
            "launch.num_processes": 4,
            **ONE,
            "launch.mixed_precision": "fp16",
            "launch.use_cpu": False,
            "launch.gpu_ids": "all",
        },
        [],
    ),
    "legacy_fp16_flag.yaml": (
        {"launch.num_processes": 2, **ONE, "launch.mixed_precision": "fp16"},
        [],
    ),
    "legacy_dynamo_backend.yaml": (
        {
            "launch.num_processes": 2,
            **ONE,
            "launch.mixed_precision": "bf16",
            "launch.use_cpu": False,
            "launch.gpu_ids": "all",
            "launch.dynamo_backend": "no",
        },
        [],
    ),
    "hand_single_machine_port.yaml": (
        {"launch.num_processes": 2, **ONE, "launch.mixed_precision": "no", "launch.use_cpu": True},
        [],
    ),
    "hand_slurm_unset_processes.yaml": (
        {**ONE, "launch.mixed_precision": "bf16", "launch.use_cpu": False, "launch.gpu_ids": "all"},
        ["num_processes: not set in the file (-1); pass -n N when you launch"],
    ),
}


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.yaml"))


def load(name: str) -> dict[str, Any]:
    data = load_yaml_file(CORPUS / name).data
    assert isinstance(data, dict)
    return data


def test_the_corpus_covers_every_distributed_type() -> None:
    names = {p.name for p in corpus_files()}
    assert len(names) >= 20
    assert names == set(EXPECTED), "every corpus file needs an expectation, and only those"
    assert {load(n)["distributed_type"] for n in names} == DISTRIBUTED_TYPES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_corpus_file(name: str) -> None:
    expected = EXPECTED[name]
    if isinstance(expected, str):
        with pytest.raises(ConfigError) as caught:
            map_hf_config(load(name), name)
        message = str(caught.value)
        assert message.startswith(f"{name}: ") and expected in message
        assert "\n" not in message
        return
    data = load(name)
    result = map_hf_config(data, name)
    values, notes = expected
    if data["distributed_type"] != "FSDP":  # every other type says: no FSDP
        values = {**values, "launch.fsdp": False}
    assert result.values == values
    assert len(result.notes) == len(notes)
    for note, start in zip(result.notes, notes, strict=True):
        assert note.startswith(start)


def accelerate_total(data: dict[str, Any]) -> int:
    """How many processes `accelerate launch` starts in all for this file."""
    return 1 if data["distributed_type"] == "NO" else int(data["num_processes"])


@pytest.mark.parametrize(
    "name", sorted(n for n, e in EXPECTED.items() if not isinstance(e, str) and e[0])
)
def test_an_imported_config_starts_what_accelerate_starts(name: str, tmp_path: Path) -> None:
    data = load(name)
    values = map_hf_config(data, name).values
    project = {k: v for k, v in values.items() if v is not None}
    config = resolve(project=None, user=None, env={}, flags=project)
    (tmp_path / "train.py").write_text("")
    plan = plan_launch(
        config,
        LaunchRequest(script="train.py"),
        env={},
        cwd=tmp_path,
        now=datetime(2026, 1, 1, tzinfo=timezone.utc),
        run_id="RUN",
        workspace=tmp_path,
        runs_dir=tmp_path,
        cache_dir=tmp_path,
        python="python",
        gpu_count=8,
    )
    if data.get("num_processes", 1) != -1:
        assert plan.world_size == accelerate_total(data)
    if plan.nnodes == 1:  # a free port per launch: two projects never share a store
        assert plan.rdzv_endpoint == "localhost:0" and plan.rdzv_id == "RUN"
    else:
        assert plan.rdzv_endpoint == f"{data['main_process_ip']}:{data['main_process_port']}"


def test_keys_accelerate_writes_with_defaults_import_silently() -> None:
    data = load("default_cpu.yaml")
    assert data["downcast_bf16"] is False and data["same_network"] is False
    assert map_hf_config(data).notes == []
    legacy = load("legacy_0_12_multi_gpu.yaml")
    assert legacy["fsdp_config"] == {} and legacy["same_network"] is True
    assert map_hf_config(legacy).notes == []


def test_values_accel_does_not_use_are_reported_not_guessed() -> None:
    data = {
        **load("multi_gpu_2.yaml"),
        "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD"},
        "dynamo_config": {"dynamo_backend": "NO", "dynamo_options": {"x": 1}},
        "my_own_key": 1,
    }
    notes = map_hf_config(data).notes
    assert notes == [
        "dynamo_config.dynamo_options: not used by accel",
        "fsdp_config: ignored, as Accelerate ignores it for distributed_type MULTI_GPU",
        "my_own_key: not a Hugging Face Accelerate key accel knows; ignored",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_machines": 0}, "num_machines: expected an integer >= 1"),
        (
            {"num_processes": 4096, "num_machines": 2, "main_process_ip": "h"},
            "num_processes per machine: expected an integer from 1 to",
        ),
        ({"num_machines": 2, "main_process_ip": None}, "needs main_process_ip"),
        ({"num_machines": 2, "main_process_ip": "h", "machine_rank": 2}, "out of range"),
        ({"gpu_ids": "zero"}, "gpu_ids: expected 'all' or a list of GPU indices"),
        ({"distributed_type": "MULTI_TPU"}, "unknown distributed_type 'MULTI_TPU'"),
        ({"parallelism_config": {"tp_size": 2}}, "parallelism_config"),
        # hand edits gone wrong: a list or a mapping where Accelerate writes a word was a
        # TypeError (unhashable) or written into the project file as its Python repr
        ({"distributed_type": ["MULTI_GPU"]}, "distributed_type: expected a word like MULTI_GPU"),
        ({"distributed_type": {"a": 1}}, "distributed_type: expected a word like MULTI_GPU"),
        ({"compute_environment": ["X"]}, "compute_environment: expected a word like LOCAL"),
        (
            {"dynamo_config": {"dynamo_backend": ["inductor"]}},
            "dynamo_config.dynamo_backend: expected a word like INDUCTOR, got ['inductor']",
        ),
        (
            {"dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_mode": {"x": [1]}}},
            "dynamo_config.dynamo_mode: expected a word or true/false, got {'x': [1]}",
        ),
    ],
)
def test_bad_values_are_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        map_hf_config({**load("multi_gpu_2.yaml"), **change}, "f.yaml")
    assert str(caught.value).startswith("f.yaml: ")


def test_a_null_dynamo_setting_is_not_set() -> None:
    data = {**load("multi_gpu_2.yaml"), "dynamo_config": {"dynamo_backend": None}}
    assert "launch.dynamo_backend" not in map_hf_config(data).values  # not the backend "none"


def test_an_ipv6_host_and_the_default_port() -> None:
    data = {**load("multi_gpu_2nodes_rank0.yaml"), "main_process_ip": "fd00::1"}
    del data["main_process_port"]
    assert map_hf_config(data).values["launch.rdzv_endpoint"] == "[fd00::1]:29500"


def test_import_into_the_project_file(project: Path) -> None:
    ws = Workspace.discover().ensure()
    ws.config_file.write_text(
        "# keep me\nlaunch:\n  env:\n    MINE: '1'\ncache:\n  max_size: 5GB\n"
    )
    config_project.import_hf(ws, CORPUS / "multi_gpu_2nodes_rank1_c10d.yaml")
    text = ws.config_file.read_text()
    assert "# keep me" in text
    cfg = Workspace.discover().config
    assert cfg["launch.num_processes"] == 8 and cfg["launch.num_machines"] == 2
    assert cfg["launch.rdzv_endpoint"] == "10.1.2.3:29500"
    assert cfg["cache.max_size"] == 5 * 10**9
    # A one-machine config takes the fixed endpoint away; variables join the project's.
    config_project.import_hf(ws, CORPUS / "multi_gpu_debug.yaml")
    cfg = Workspace.discover().config
    assert cfg["launch.rdzv_endpoint"] is None and cfg["launch.num_machines"] == 1
    assert cfg["launch.machine_rank"] == 0
    assert cfg["launch.env"] == {"MINE": "1", "ACCELERATE_DEBUG_MODE": "true"}
    assert "rdzv_endpoint" not in ws.config_file.read_text()


FSDP2 = load("fsdp.yaml")


def fsdp_with(**fsdp_config: Any) -> dict[str, Any]:
    return {**FSDP2, "fsdp_config": {**FSDP2["fsdp_config"], **fsdp_config}}


@pytest.mark.parametrize(
    ("change", "key", "value"),
    [
        ({"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP"}, "launch.fsdp_wrap", "size"),
        ({"fsdp_auto_wrap_policy": "NO_WRAP"}, "launch.fsdp_wrap", "none"),
        ({"fsdp_auto_wrap_policy": None}, "launch.fsdp_wrap", "none"),  # Accelerate's default
        ({"fsdp_min_num_params": 2000}, "launch.fsdp_min_params", 2000),
        ({"fsdp_reshard_after_forward": False}, "launch.fsdp_reshard_after_forward", False),
        (
            {"fsdp_transformer_layer_cls_to_wrap": "BertLayer,BertEmbeddings"},
            "launch.fsdp_layer_classes",
            ["BertLayer", "BertEmbeddings"],
        ),
        ({"fsdp_transformer_layer_cls_to_wrap": None}, "launch.fsdp_layer_classes", []),
    ],
)
def test_fsdp2_settings_accel_honours(change: dict[str, Any], key: str, value: Any) -> None:
    assert map_hf_config(fsdp_with(**change)).values[key] == value


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"fsdp_version": 1}, "fsdp_config.fsdp_version 1: accel shards with FSDP2"),
        ({"fsdp_version": None}, "fsdp_config.fsdp_version 1: accel shards with FSDP2"),
        ({"fsdp_offload_params": True}, "fsdp_config.fsdp_offload_params: CPU offload"),
        ({"fsdp_activation_checkpointing": True}, "fsdp_activation_checkpointing: FSDP act"),
        ({"fsdp_ignored_modules": "Head"}, "fsdp_config.fsdp_ignored_modules: modules"),
        ({"fsdp_auto_wrap_policy": "LAMBDA"}, "fsdp_auto_wrap_policy: expected one of"),
        ({"fsdp_reshard_after_forward": "FULL_SHARD"}, "fsdp_reshard_after_forward: expected"),
        ({"fsdp_transformer_layer_cls_to_wrap": "a.B"}, "fsdp_transformer_layer_cls_to_wrap:"),
        ({"fsdp_min_num_params": -1}, "fsdp_config.fsdp_min_num_params: expected an integer"),
    ],
)
def test_fsdp_settings_accel_cannot_honour_are_refused(
    change: dict[str, Any], message: str
) -> None:
    data = fsdp_with(**change)
    if change.get("fsdp_version", 2) is None:
        del data["fsdp_config"]["fsdp_version"]  # absent: Accelerate runs FSDP1
    with pytest.raises(ConfigError, match=message) as caught:
        map_hf_config(data, "f.yaml")
    assert str(caught.value).startswith("f.yaml: fsdp_config.") and "\n" not in str(caught.value)


def test_fsdp_settings_that_change_nothing_are_notes() -> None:
    data = fsdp_with(
        fsdp_sharding_strategy="FULL_SHARD",
        fsdp_use_orig_params=True,
        fsdp_state_dict_type="FULL_STATE_DICT",
        fsdp_cpu_ram_efficient_loading=False,
        fsdp_sync_module_states=True,
        fsdp_mystery=1,
    )
    assert map_hf_config(data).notes == [
        "fsdp_config.fsdp_state_dict_type FULL_STATE_DICT: accel's checkpoints stay sharded "
        "(torch.distributed.checkpoint); export the whole model with acc.get_state_dict(model)",
        "fsdp_config.fsdp_sharding_strategy: ignored with FSDP2, as Accelerate ignores it",
        "fsdp_config.fsdp_use_orig_params: ignored with FSDP2, as Accelerate ignores it",
        "fsdp_config.fsdp_mystery: not an FSDP key accel knows; ignored",
    ]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_cli_refuses_fsdp1_in_one_line_and_writes_nothing(
    project: Path, accel_exe: list[str], tmp_path: Path
) -> None:
    fsdp1 = tmp_path / "fsdp1.yaml"
    fsdp1.write_text(
        (CORPUS / "fsdp.yaml").read_text().replace("fsdp_version: 2", "fsdp_version: 1")
    )
    done = subprocess.run(
        [*accel_exe, "config", "import", str(fsdp1)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "accel shards with FSDP2" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / ".accelerate").exists()
    ok = subprocess.run(
        [*accel_exe, "config", "import", str(CORPUS / "default_cpu.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0
    assert ok.stderr == f"note: created a new workspace at {project / '.accelerate'}\n"
    assert "launch.rdzv_endpoint unset" in ok.stdout
    assert "launch.num_processes = 1" in ok.stdout


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_cli_imports_an_fsdp2_config(project: Path, accel_exe: list[str]) -> None:
    done = subprocess.run(
        [*accel_exe, "config", "import", str(CORPUS / "fsdp.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "fsdp_cpu_ram_efficient_loading: not used" in done.stderr  # a warning line
    cfg = Workspace.discover().config
    assert cfg["launch.fsdp"] is True and cfg["launch.fsdp_wrap"] == "transformer"
    assert cfg["launch.fsdp_layer_classes"] == ["LlamaDecoderLayer"]
    # Importing a DDP config turns FSDP off again.
    config_project.import_hf(Workspace.discover(), CORPUS / "multi_gpu_2.yaml")
    assert Workspace.discover().config["launch.fsdp"] is False
