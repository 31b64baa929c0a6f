"""Every flag of ``accelerate launch`` under ``accel launch``: one table of decisions (pure).

Each flag of Hugging Face Accelerate's launcher is placed in :data:`FLAGS`, keyed by its
name (underscores, no dashes; both spellings work), as one of:

- ``same``: Accelerate's meaning. For most that is the variables its launcher gives the
  workers, which Accelerate's own ``Accelerator`` in the script reads (``FSDP_*``,
  ``ACCELERATE_CPU_AFFINITY``, ...): :func:`worker_env` sets the same ones, with
  Accelerate's defaults for what the line leaves out.
- ``noted``: accepted; where accel deliberately differs, one line says what it does.
- ``refused``: DeepSpeed, Megatron-LM, the fp8 backends, TPU and SageMaker launching,
  the n-D parallelism sizes: one line naming the reason and the alternative, exit 2,
  nothing started.

``--quiet`` is both accel's (no worker output on the console) and Accelerate's (shorter
launcher tracebacks; accel's launcher prints none of its own). ``-q``, Accelerate's
spelling only, always has Accelerate's meaning; ``--quiet`` has it on an Accelerate
command line (one that carries a flag only Accelerate has, such as ``--use_fsdp`` or
``--num_processes``), said in one line, and accel's everywhere else.

The table is checked against the installed Accelerate's parser
(tests/launch/test_launch_accelerate.py): a release that adds a flag fails it until the
flag is placed, and one that removes a flag until it is named in :data:`RETIRED`;
docs/commands/launch.md shows :func:`markdown` of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel.errors import UsageError

SAME, NOTED, REFUSED = "same", "noted", "refused"


@dataclass(frozen=True)
class Placement:
    """How ``accel launch`` takes one of Accelerate's flags: ``kind`` and what it does
    (``same``), the note it prints (``noted``) or why it is refused (``refused``)."""

    kind: str
    says: str
    switch: bool = False  # takes no value (Accelerate's store_true)


def _same(says: str, switch: bool = False) -> Placement:
    return Placement(SAME, says, switch)


def _noted(says: str, switch: bool = False) -> Placement:
    return Placement(NOTED, says, switch)


def _refused(says: str, switch: bool = False) -> Placement:
    return Placement(REFUSED, says, switch)


_INSTEAD = ", or launch the job with `accelerate launch`"
_DEEPSPEED = (
    "DeepSpeed is not supported by accel: shard with --use_fsdp --fsdp_version 2" + _INSTEAD
)
_MEGATRON = (
    "Megatron-LM is not supported by accel: shard with --use_fsdp --fsdp_version 2" + _INSTEAD
)
_FP8 = (
    "the fp8 backends (TransformerEngine, MS-AMP, torchao) are not supported by accel: "
    "train in --mixed_precision bf16" + _INSTEAD
)
_TPU = (
    "TPU pod launching (accelerate's --tpu family) is not supported by accel: drop the flag; "
    "a torch_xla script runs under plain `accel launch` (docs/compatibility.md)" + _INSTEAD
)
_PARALLEL = (
    "tensor, context and sequence parallel sizes (parallelism_config) are not supported by "
    "accel: shard data-parallel with --use_fsdp --fsdp_version 2" + _INSTEAD
)
_SAGEMAKER = (
    "SageMaker launching is not supported by accel: run `accel launch` on the machine itself"
    + _INSTEAD
)

FLAGS: dict[str, Placement] = {
    # The launch itself: accel's own options under Accelerate's names.
    "config_file": _same(
        "a Hugging Face Accelerate config for this launch, read as `accel config import` reads "
        "it; flags still win",
    ),
    "quiet": _noted(
        "Accelerate's meaning on an Accelerate command line: worker output stays on the "
        "console, and accel's launcher prints no traceback of its own; elsewhere (and as "
        "accel's flag) it hides worker output",
        switch=True,
    ),
    "cpu": _same("CPU workers with gloo (`ACCELERATE_USE_CPU=true`)", switch=True),
    "multi_gpu": _same("one worker per GPU unless a count is given", switch=True),
    "mixed_precision": _same(
        "`ACCELERATE_MIXED_PRECISION` (`no`, `fp16`, `bf16`; `fp8` is refused: its backends are"
        " not supported)",
    ),
    "num_processes": _same("workers in the whole job, divided among the nodes"),
    "num_machines": _same("`--nnodes`"),
    "num_cpu_threads_per_process": _same(
        "each worker's `OMP_NUM_THREADS` (an `--env OMP_NUM_THREADS=` wins)",
    ),
    "enable_cpu_affinity": _same(
        "`ACCELERATE_CPU_AFFINITY=1`: Accelerate's `Accelerator` pins each worker to its GPU's "
        "NUMA node (accel's does not pin)",
        switch=True,
    ),
    "dynamo_backend": _same("`launch.dynamo_backend` (`ACCELERATE_DYNAMO_BACKEND`)"),
    "dynamo_mode": _same("`ACCELERATE_DYNAMO_MODE`"),
    "dynamo_use_fullgraph": _same("`ACCELERATE_DYNAMO_USE_FULLGRAPH`", switch=True),
    "dynamo_use_dynamic": _same("`ACCELERATE_DYNAMO_USE_DYNAMIC`", switch=True),
    "dynamo_use_regional_compilation": _same(
        "`ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION`",
        switch=True,
    ),
    "debug": _same("`ACCELERATE_DEBUG_MODE=true`", switch=True),
    "gpu_ids": _same("the GPUs to use (`CUDA_VISIBLE_DEVICES`)"),
    "same_network": _same(
        "nodes meet at `--main_process_ip:--main_process_port`, as with Accelerate's static "
        "rendezvous (accel's c10d serves one network or several)",
        switch=True,
    ),
    "machine_rank": _same("`--node-rank`"),
    "main_process_ip": _same("node 0's host for a multi-node job (one node binds a free port)"),
    "main_process_port": _same("node 0's port for a multi-node job (one node binds a free port)"),
    "tee": _same("as torchrun's `--tee`: these streams also go to files in `--log_dir`"),
    "log_dir": _same("as torchrun's `--log-dir`: the `--tee` streams' files, torchrun's layout"),
    "role": _same("the workers' `ROLE_NAME`"),
    "rdzv_backend": _same("`c10d` or `static` (accel's rendezvous is c10d, hosted by node 0)"),
    "rdzv_conf": _same("settings of torch's c10d rendezvous, as torchrun's `--rdzv-conf`"),
    "max_restarts": _same("restarts after a failure"),
    "monitor_interval": _same(
        "accepted; accel sees a worker end at once (its exit watch), and checks them every 0.1 s"
    ),
    "module": _same("SCRIPT is a module (`python -m`)", switch=True),
    "no_python": _same("SCRIPT is a program, run as it is", switch=True),
    "env": _same(
        "accel's: KEY=VALUE for every worker (Accelerate's sets variables on TPU pod VMs, "
        "refused with `--tpu_cluster`)",
    ),
    # TPU: the launch, and settings that change nothing off a TPU (as under Accelerate).
    "tpu": _refused(_TPU, switch=True),
    "tpu_cluster": _refused(_TPU, switch=True),
    "no_tpu_cluster": _refused(_TPU, switch=True),
    "tpu_use_sudo": _refused(_TPU, switch=True),
    "vm": _refused(_TPU),
    "main_training_function": _same(
        "TPU only: changes nothing on CPU or CUDA workers, as under Accelerate",
    ),
    "downcast_bf16": _same(
        "TPU only (`XLA_DOWNCAST_BF16`): changes nothing on CPU or CUDA workers, as under "
        "Accelerate",
        switch=True,
    ),
    # FSDP: accel's --fsdp options, and every variable Accelerate's launcher exports.
    "use_fsdp": _noted(
        "`--fsdp`, with every `FSDP_*` variable `accelerate launch` exports; without "
        "`--fsdp_version 2` accel still shards with FSDP2 (Accelerate's default is FSDP1), said"
        " in one line",
        switch=True,
    ),
    "fsdp_version": _same("`2` (`FSDP_VERSION`); `1` is refused: accel shards with FSDP2 only"),
    "fsdp_offload_params": _same(
        "`false` (`FSDP_OFFLOAD_PARAMS`); `true` is refused: accel does not offload parameters "
        "to the CPU",
    ),
    "fsdp_min_num_params": _same("`--fsdp-min-params` (`FSDP_MIN_NUM_PARAMS`)"),
    "fsdp_sharding_strategy": _same(
        "exported for the workers as `accelerate launch` exports it (`FSDP_SHARDING_STRATEGY`);"
        " FSDP2 ignores it, under Accelerate too",
    ),
    "fsdp_reshard_after_forward": _same(
        "`--fsdp-reshard-after-forward` (`FSDP_RESHARD_AFTER_FORWARD`)",
    ),
    "fsdp_auto_wrap_policy": _same(
        "`--fsdp-wrap` (`FSDP_AUTO_WRAP_POLICY`); left out, `NO_WRAP`, as under Accelerate",
    ),
    "fsdp_transformer_layer_cls_to_wrap": _same(
        "`--fsdp-layer-classes` (`FSDP_TRANSFORMER_CLS_TO_WRAP`)",
    ),
    "fsdp_backward_prefetch": _same(
        "exported for the workers as `accelerate launch` exports it (`FSDP_BACKWARD_PREFETCH`);"
        " FSDP2 ignores it, under Accelerate too",
    ),
    "fsdp_state_dict_type": _same(
        "exported for the workers as `accelerate launch` exports it (`FSDP_STATE_DICT_TYPE`), "
        "for Accelerate's `Accelerator`; accel's own checkpoints stay sharded",
    ),
    "fsdp_forward_prefetch": _same(
        "exported for the workers as `accelerate launch` exports it (`FSDP_FORWARD_PREFETCH`); "
        "FSDP2 ignores it, under Accelerate too",
    ),
    "fsdp_use_orig_params": _same(
        "exported for the workers as `accelerate launch` exports it (`FSDP_USE_ORIG_PARAMS`); "
        "FSDP2 ignores it, under Accelerate too",
    ),
    "fsdp_cpu_ram_efficient_loading": _same(
        "exported for the workers as `accelerate launch` exports it "
        "(`FSDP_CPU_RAM_EFFICIENT_LOADING`), for Accelerate's `Accelerator`; accel's builds the"
        " model on every rank",
    ),
    "fsdp_sync_module_states": _same(
        "exported for the workers as `accelerate launch` exports it "
        "(`FSDP_SYNC_MODULE_STATES`); accel's `Accelerator` always starts every rank from rank "
        "0's weights",
    ),
    "fsdp_activation_checkpointing": _same(
        "`false` (`FSDP_ACTIVATION_CHECKPOINTING`); `true` is refused: accel does not "
        "checkpoint activations",
    ),
    "fsdp_activation_checkpointing_offload": _same(
        "`false` (`FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD`); `true` is refused: accel does not "
        "checkpoint activations",
    ),
    # What accel does not run.
    "use_deepspeed": _refused(_DEEPSPEED, switch=True),
    "use_megatron_lm": _refused(_MEGATRON, switch=True),
    "use_parallelism_config": _refused(_PARALLEL, switch=True),
    "mpirun_hostfile": _refused(
        "accel does not start the other machines: run `accel launch` on each node with "
        "--num_machines, --machine_rank and --main_process_ip",
    ),
    "aws_access_key_id": _refused(_SAGEMAKER),
    "aws_secret_access_key": _refused(_SAGEMAKER),
}
for _name in (
    "deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
    "offload_optimizer_nvme_path", "offload_param_nvme_path", "gradient_accumulation_steps",
    "gradient_clipping", "zero3_init_flag", "zero3_save_16bit_model", "deepspeed_hostfile",
    "deepspeed_exclusion_filter", "deepspeed_inclusion_filter", "deepspeed_multinode_launcher",
    "deepspeed_moe_layer_cls_names",
):  # fmt: skip
    FLAGS[_name] = _refused(_DEEPSPEED)
for _name, _instead in (
    ("gradient_accumulation_steps", "give gradient_accumulation_steps= to Accelerator()"),
    ("gradient_clipping", "clip in the script (accelerator.clip_grad_norm_)"),
):
    FLAGS[_name] = _refused(
        "a DeepSpeed setting (Accelerate's launcher passes it to DeepSpeed only), and DeepSpeed "
        f"is not supported by accel: {_instead}" + _INSTEAD
    )
for _name in (
    "tp_degree", "use_custom_fsdp", "no_load_optim", "eod_mask_loss",
    "overlap_cpu_optimizer_d2h_h2d", "no_save_optim", "optimizer_cpu_offload",
    "use_precision_aware_optimizer", "decoder_last_pipeline_num_layers", "pp_degree",
    "num_micro_batches", "sequence_parallelism", "recompute_activations",
    "use_distributed_optimizer", "gradient_clipping", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "attention_backend",
    "expert_model_parallel_size", "context_parallel_size", "attention_dropout",
    "hidden_dropout", "attention_softmax_in_fp32", "expert_tensor_parallel_size",
    "calculate_per_token_loss", "use_rotary_position_embeddings",
):  # fmt: skip
    FLAGS[f"megatron_lm_{_name}"] = _refused(_MEGATRON)
for _name in (
    "backend", "margin", "interval", "format", "amax_history_len", "amax_compute_algo",
    "override_linear_precision", "opt_level", "enable_fsdp_float8_all_gather", "pad_inner_dim",
):  # fmt: skip
    FLAGS[f"fp8_{_name}"] = _refused(_FP8)
FLAGS["fp8_use_autocast_during_eval"] = _refused(_FP8, switch=True)
# Flags a later Accelerate release removed, kept (and refused with their line) for the
# command lines written for the releases that had them: the name, the release without it.
RETIRED = {"fp8_opt_level": "1.16"}  # MS-AMP's, gone with the msamp backend
for _name in (
    "dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend",
    "cp_comm_strategy", "sp_size", "sp_backend", "sp_seq_length",
    "sp_seq_length_is_variable", "sp_attn_implementation",
):  # fmt: skip
    FLAGS[f"parallelism_config_{_name}"] = _refused(_PARALLEL)

# Accelerate's flags that torchrun or accel also have (or that arrive as the same
# option): any other one on the line makes it an Accelerate command line.
_TORCHRUN_OR_ACCEL = frozenset(
    {"quiet", "cpu", "mixed_precision", "gpu_ids", "tee", "log_dir", "role", "rdzv_backend",
     "rdzv_conf", "max_restarts", "monitor_interval", "module", "no_python", "env",
     "dynamo_backend", "fsdp_reshard_after_forward", "num_machines", "machine_rank"}
)  # fmt: skip
# Flags whose parsed option in accel.cli.launch has another name.
_PARAM = {"num_machines": "nnodes", "machine_rank": "node_rank"}

# What `accelerate launch --use_fsdp` exports beyond what accel's --fsdp exports itself
# (ACCELERATE_USE_FSDP, FSDP_VERSION, the wrap policy, classes, size and resharding, from
# the launch.fsdp* keys these flags set): Accelerate's default, or None when it exports
# the variable only for a value on the line.
_FSDP_EXTRA = {
    "fsdp_sharding_strategy": "FULL_SHARD",
    "fsdp_offload_params": "false",
    "fsdp_backward_prefetch": None,
    "fsdp_state_dict_type": None,
    "fsdp_forward_prefetch": "false",
    "fsdp_use_orig_params": "true",
    "fsdp_cpu_ram_efficient_loading": "true",
    "fsdp_sync_module_states": "true",
    "fsdp_activation_checkpointing": "false",
    "fsdp_activation_checkpointing_offload": "false",
}
_VALUES_AS_GIVEN = ("fsdp_sharding_strategy", "fsdp_backward_prefetch", "fsdp_state_dict_type")
_FALSE = ("false", "0", "no", "off")
_ONLY_FALSE = {
    "fsdp_offload_params": "accel does not offload parameters to the CPU",
    "fsdp_activation_checkpointing": "accel does not checkpoint activations",
    "fsdp_activation_checkpointing_offload": "accel does not checkpoint activations",
}


def generated() -> dict[str, Placement]:
    """The flags :mod:`accel.cli.launch` does not declare: added to the command hidden,
    their values kept for :func:`checked` (see ``LaunchCommand``)."""
    return {name: p for name, p in FLAGS.items() if name not in _DECLARED}


# Declared as options of accel.cli.launch (their values arrive as its parameters).
_DECLARED = frozenset(
    {"config_file", "quiet", "cpu", "multi_gpu", "mixed_precision", "num_processes",
     "num_machines", "num_cpu_threads_per_process", "dynamo_backend", "dynamo_mode",
     "dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation",
     "debug", "gpu_ids", "machine_rank", "main_process_ip", "main_process_port", "tee",
     "log_dir", "role", "rdzv_backend", "rdzv_conf", "max_restarts", "monitor_interval",
     "module", "no_python", "env", "use_fsdp", "fsdp_version", "fsdp_min_num_params",
     "fsdp_reshard_after_forward", "fsdp_auto_wrap_policy",
     "fsdp_transformer_layer_cls_to_wrap"}
)  # fmt: skip


@dataclass(frozen=True)
class AccelerateFlags:
    """What Accelerate's flags ask for: config flags, the workers' variables, the notes
    to print, and whether ``--quiet`` keeps accel's meaning (hide worker output)."""

    flags: dict[str, Any]
    env: dict[str, str]
    notes: list[str]
    quiet: bool


def checked(params: Mapping[str, Any], given: Mapping[str, Any]) -> AccelerateFlags:
    """``params``: the parsed options of ``accel launch``; ``given``: the values of the
    :func:`generated` flags on the line (``-q`` among them as ``short_quiet``: Accelerate's
    meaning, which is what accel's launcher does anyway). UsageError for a refused flag."""
    for name, value in given.items():
        if name in FLAGS and FLAGS[name].kind == REFUSED and value not in (None, False):
            raise UsageError(f"--{name.replace('_', '-')}: {FLAGS[name].says}")
    if str(params.get("mixed_precision") or "").strip().lower() == "fp8":
        raise UsageError(f"--mixed-precision fp8: {_FP8}")
    values = {**{k: params.get(_PARAM.get(k, k)) for k in _DECLARED}, **given}
    flags: dict[str, Any] = {}
    notes: list[str] = []
    env: dict[str, str] = {}
    if values.get("enable_cpu_affinity"):
        env["ACCELERATE_CPU_AFFINITY"] = "1"
    if values.get("use_fsdp"):
        env.update(fsdp_env(values))
        wrap = values.get("fsdp_auto_wrap_policy") or params.get("fsdp_wrap")
        if wrap is None and params.get("config_file") is None:
            flags["launch.fsdp_wrap"] = "none"  # Accelerate's NO_WRAP when left out
        if values.get("fsdp_version") is None:
            notes.append(
                "--use-fsdp: accel shards with FSDP2 (FSDP_VERSION=2); Accelerate's default "
                "is FSDP1: give --fsdp-version 2 to say so"
            )
    hf_line = any(values.get(k) not in (None, False) for k in FLAGS if k not in _TORCHRUN_OR_ACCEL)
    if params.get("quiet") and hf_line:
        notes.append(f"--quiet is accepted: {FLAGS['quiet'].says}")
    return AccelerateFlags(
        flags=flags, env=env, notes=notes, quiet=bool(params.get("quiet")) and not hf_line
    )


def fsdp_env(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``FSDP_*`` variables ``accelerate launch --use_fsdp`` exports for these flags
    that accel's ``--fsdp`` does not, with Accelerate's defaults; UsageError for a value
    accel refuses."""
    for name, why in _ONLY_FALSE.items():
        value = values.get(name)
        if value is not None and str(value).strip().lower() not in _FALSE:
            raise UsageError(
                f"--{name.replace('_', '-')} {value}: {why}: give false or drop the flag{_INSTEAD}"
            )
    env: dict[str, str] = {}
    for name, default in _FSDP_EXTRA.items():
        value = default if values.get(name) is None else values[name]
        if value is not None:
            text = str(value)
            env[name.upper()] = text if name in _VALUES_AS_GIVEN else text.lower()
    return env


def markdown() -> str:
    """docs/commands/launch.md's table of Accelerate's flags, from :data:`FLAGS`."""
    rows = ["| flag | under accel |", "|---|---|"]
    refused: dict[str, list[str]] = {}
    for name, p in FLAGS.items():
        if p.kind == REFUSED:
            refused.setdefault(p.says, []).append(name)
            continue
        rows.append(
            f"| `--{name}` | {'accepted, with a note: ' if p.kind == NOTED else ''}{p.says} |"
        )
    for says, names in refused.items():
        flags = ", ".join(f"`--{n}`" for n in names)
        rows.append(f"| {flags} | refused: {says} |")
    return "\n".join(rows) + "\n"
