"""Regenerate the Hugging Face Accelerate config corpus with Accelerate's own writer.

    pip install accelerate && python tests/config/hf_configs/make_corpus.py

Each file is what ``accelerate config`` (``ClusterConfig``/``SageMakerConfig``, YAML) or
``accelerate config default`` (``write_basic_config``, JSON in a ``.yaml`` file) writes
for the answers below. The ``legacy_*`` and ``hand_*`` files are not generated: they keep
what older Accelerate releases wrote and what people add by hand. Not run by the tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The questionnaire's fixed answers for a local machine (cluster.py's defaults).
LOCAL: dict[str, Any] = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "downcast_bf16": "no",
    "machine_rank": 0,
    "main_training_function": "main",
    "num_machines": 1,
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": False,
    "enable_cpu_affinity": False,
    "mixed_precision": "no",
}
TWO_NODES = {"num_machines": 2, "main_process_ip": "10.1.2.3", "main_process_port": 29500}
FSDP = {
    "fsdp_version": 2,
    "fsdp_reshard_after_forward": True,
    "fsdp_offload_params": False,
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
    "fsdp_state_dict_type": "SHARDED_STATE_DICT",
    "fsdp_cpu_ram_efficient_loading": True,
    "fsdp_activation_checkpointing": False,
}
DEEPSPEED = {
    "zero_stage": 2,
    "offload_optimizer_device": "none",
    "offload_param_device": "none",
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "zero3_init_flag": False,
}
DYNAMO = {
    "dynamo_backend": "INDUCTOR",
    "dynamo_mode": "max-autotune",
    "dynamo_use_fullgraph": False,
    "dynamo_use_dynamic": True,
    "dynamo_use_regional_compilation": False,
}

CLUSTER: dict[str, dict[str, Any]] = {
    "no_cpu": {"distributed_type": "NO", "use_cpu": True},
    "no_gpu_fp16": {"distributed_type": "NO", "gpu_ids": "all", "mixed_precision": "fp16"},
    "multi_gpu_2": {"distributed_type": "MULTI_GPU", "num_processes": 2, "gpu_ids": "all"},
    "multi_gpu_ids_bf16": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 2,
        "gpu_ids": "0,1",
        "mixed_precision": "bf16",
    },
    "multi_gpu_2nodes_rank0": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 16,
        "gpu_ids": "all",
        **TWO_NODES,
    },
    "multi_gpu_2nodes_rank1_c10d": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 16,
        "gpu_ids": "all",
        **TWO_NODES,
        "machine_rank": 1,
        "same_network": False,
        "rdzv_backend": "c10d",
    },
    "multi_gpu_2nodes_odd": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 3,
        "gpu_ids": "all",
        **TWO_NODES,
    },
    "multi_gpu_2nodes_etcd": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 8,
        "gpu_ids": "all",
        **TWO_NODES,
        "same_network": False,
        "rdzv_backend": "etcd",
    },
    "multi_gpu_debug": {"distributed_type": "MULTI_GPU", "num_processes": 4, "debug": True},
    "multi_gpu_dynamo": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 2,
        "dynamo_config": DYNAMO,
    },
    "multi_gpu_affinity": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 2,
        "gpu_ids": "all",
        "enable_cpu_affinity": True,
    },
    "multi_gpu_fp8": {
        "distributed_type": "MULTI_GPU",
        "num_processes": 2,
        "mixed_precision": "fp8",
        "fp8_config": {"backend": "TE", "fp8_format": "HYBRID", "margin": 0, "interval": 1},
    },
    "multi_cpu_4": {"distributed_type": "MULTI_CPU", "num_processes": 4, "use_cpu": True},
    "multi_cpu_mpi": {
        "distributed_type": "MULTI_CPU",
        "num_processes": 16,
        "use_cpu": True,
        "num_machines": 4,
        "main_process_ip": "10.1.2.3",
        "main_process_port": 29500,
        "mpirun_config": {"mpirun_hostfile": "/home/me/hostfile"},
    },
    "multi_npu": {"distributed_type": "MULTI_NPU", "num_processes": 8, "gpu_ids": "all"},
    "multi_mlu": {"distributed_type": "MULTI_MLU", "num_processes": 4, "gpu_ids": "all"},
    "multi_sdaa": {"distributed_type": "MULTI_SDAA", "num_processes": 4, "gpu_ids": "all"},
    "multi_musa": {"distributed_type": "MULTI_MUSA", "num_processes": 4, "gpu_ids": "all"},
    "multi_xpu": {"distributed_type": "MULTI_XPU", "num_processes": 2, "gpu_ids": "all"},
    "multi_hpu": {"distributed_type": "MULTI_HPU", "num_processes": 8, "gpu_ids": "all"},
    "multi_neuron": {"distributed_type": "MULTI_NEURON", "num_processes": 2, "gpu_ids": "all"},
    "deepspeed": {
        "distributed_type": "DEEPSPEED",
        "num_processes": 4,
        "deepspeed_config": DEEPSPEED,
    },
    "fsdp": {"distributed_type": "FSDP", "num_processes": 4, "fsdp_config": FSDP},
    "megatron_lm": {
        "distributed_type": "MEGATRON_LM",
        "num_processes": 8,
        "megatron_lm_config": {
            "megatron_lm_tp_degree": 2,
            "megatron_lm_pp_degree": 2,
            "megatron_lm_num_micro_batches": 2,
            "megatron_lm_sequence_parallelism": True,
        },
    },
    "xla_tpu": {
        "distributed_type": "XLA",
        "num_processes": 8,
        "mixed_precision": "bf16",
        "downcast_bf16": "yes",
        "tpu_name": "my-tpu",
        "tpu_zone": "us-central1-a",
    },
}


def main() -> None:
    from accelerate.commands.config.config_args import ClusterConfig, SageMakerConfig
    from accelerate.commands.config.default import write_basic_config

    for name, answers in CLUSTER.items():
        ClusterConfig(**{**LOCAL, **answers}).to_yaml_file(str(HERE / f"{name}.yaml"))
    SageMakerConfig(
        compute_environment="AMAZON_SAGEMAKER",
        distributed_type="DATA_PARALLEL",
        mixed_precision="fp16",
        use_cpu=False,
        debug=False,
        ec2_instance_type="ml.p3.16xlarge",
        iam_role_name="accelerate_sagemaker_execution_role",
        num_machines=2,
    ).to_yaml_file(str(HERE / "sagemaker.yaml"))
    # `accelerate config default` on a machine without GPUs (this one) and with four.
    target = HERE / "default_cpu.yaml"
    target.unlink(missing_ok=True)
    write_basic_config(save_location=str(target))
    ClusterConfig(
        compute_environment="LOCAL_MACHINE",
        mixed_precision="no",
        num_processes=4,
        use_cpu=False,
        distributed_type="MULTI_GPU",
        debug=False,
        enable_cpu_affinity=False,
    ).to_json_file(str(HERE / "default_4gpu.yaml"))


if __name__ == "__main__":
    main()
