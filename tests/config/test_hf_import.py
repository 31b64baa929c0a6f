from __future__ import annotations

from pathlib import Path

from accel.config import project as config_project
from accel.config.hf_import import map_hf_config
from accel.workspace import Workspace

HF_CONFIG = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_GPU
downcast_bf16: 'no'
dynamo_config:
  dynamo_backend: INDUCTOR
gpu_ids: 0,1
machine_rank: 1
main_process_ip: 10.1.2.3
main_process_port: 29600
main_training_function: main
mixed_precision: bf16
num_machines: 2
num_processes: 4
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
fsdp_config: {}
megatron_lm_config: {}
"""


def test_mapping_is_pure_and_reports_what_was_not_mapped() -> None:
    import yaml

    result = map_hf_config(yaml.safe_load(HF_CONFIG))
    assert result.values == {
        "launch.num_processes": 4,
        "launch.num_machines": 2,
        "launch.machine_rank": 1,
        "launch.mixed_precision": "bf16",
        "launch.use_cpu": False,
        "launch.gpu_ids": [0, 1],
        "launch.rdzv_endpoint": "10.1.2.3:29600",
        "launch.dynamo_backend": "inductor",
    }
    assert result.notes == [
        "fsdp_config: not mapped (accel has no equivalent)",
        "megatron_lm_config: not mapped (accel has no equivalent)",
    ]


def test_unsupported_values_are_reported_not_guessed() -> None:
    result = map_hf_config(
        {"mixed_precision": "fp8", "rdzv_backend": "etcd", "distributed_type": "DEEPSPEED"}
    )
    assert "launch.mixed_precision" not in result.values
    assert any(n.startswith("mixed_precision: not mapped") for n in result.notes)
    assert any(n.startswith("rdzv_backend") for n in result.notes)
    assert any(n.startswith("distributed_type: DEEPSPEED") for n in result.notes)


def test_import_into_the_project_file_keeps_existing_keys(project: Path) -> None:
    source = project / "default_config.yaml"
    source.write_text(HF_CONFIG)
    ws = Workspace.discover().ensure()
    ws.config_file.write_text("# keep me\ncache:\n  max_size: 5GB\n")
    config_project.import_hf(ws, source)
    text = ws.config_file.read_text()
    assert "# keep me" in text
    cfg = Workspace.discover().config
    assert cfg["launch.num_processes"] == 4
    assert cfg["launch.rdzv_endpoint"] == "10.1.2.3:29600"
    assert cfg["cache.max_size"] == 5 * 10**9
