"""Map an Accelerate config's ``fsdp_config`` onto accel's ``launch.fsdp*`` keys (pure).

accel shards with FSDP2 (``fully_shard``), as Accelerate does with ``fsdp_version: 2``.
What it honours: the wrapping policy, the layer classes, the size threshold and
``fsdp_reshard_after_forward``. What it cannot do the way Accelerate would (FSDP1, CPU
offload, activation checkpointing, ignored modules) is refused with a
:class:`ConfigError`, one line each; settings that change nothing accel runs become notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.config import schema
from accel.errors import ConfigError

WRAPS = ("transformer", "size", "none")
# Accelerate's names of the wrapping policies (fsdp_config, FSDP_AUTO_WRAP_POLICY).
HF_WRAP = {"transformer": "TRANSFORMER_BASED_WRAP", "size": "SIZE_BASED_WRAP", "none": "NO_WRAP"}

# Accelerate's FSDP2 ignores these (FSDP1 settings, with a warning): so does accel.
_FSDP1_ONLY = (
    "fsdp_sharding_strategy",
    "fsdp_backward_prefetch",
    "fsdp_forward_prefetch",
    "fsdp_use_orig_params",
)
# Only `false` can be honoured: accel does not offload, checkpoint activations or skip.
_REFUSED_WHEN_SET = {
    "fsdp_offload_params": "CPU offload of parameters is not supported by accel",
    "fsdp_activation_checkpointing": "FSDP activation checkpointing is not supported by accel",
    "fsdp_ignored_modules": "modules FSDP leaves unsharded are not supported by accel",
}
_MAPPED = (
    "fsdp_version",
    "fsdp_auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_min_num_params",
    "fsdp_reshard_after_forward",
)


def wrap_name(text: str) -> str:
    """accel's name of a wrapping policy given in accel's or Accelerate's spelling."""
    lowered = text.strip().lower()
    for name, hf in HF_WRAP.items():
        if lowered in (name, hf.lower()):
            return name
    raise ValueError(
        f"expected one of {', '.join(WRAPS)} (or {', '.join(HF_WRAP.values())}), got {text!r}"
    )


def fsdp_values(data: Mapping[str, Any], source: str, notes: list[str]) -> dict[str, Any]:
    """``launch.fsdp`` (and its details for ``distributed_type: FSDP``); refuses what
    accel cannot run, adds a note for what it does not use."""
    if data.get("distributed_type") != "FSDP":
        return {"launch.fsdp": False}
    section = data.get("fsdp_config") or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: fsdp_config: expected a mapping, got {section!r}")
    _refuse(section, source)
    values: dict[str, Any] = {"launch.fsdp": True}
    wrap = section.get("fsdp_auto_wrap_policy") or "NO_WRAP"  # Accelerate's default
    try:
        values["launch.fsdp_wrap"] = wrap_name(str(wrap))
    except ValueError as exc:
        raise ConfigError(f"{source}: fsdp_config.fsdp_auto_wrap_policy: {exc}") from None
    values["launch.fsdp_layer_classes"] = _classes(section, source)
    for hf_key, key in (
        ("fsdp_min_num_params", "launch.fsdp_min_params"),
        ("fsdp_reshard_after_forward", "launch.fsdp_reshard_after_forward"),
    ):
        if section.get(hf_key) is not None:
            values[key] = schema.imported(key, section[hf_key], f"{source}: fsdp_config.{hf_key}")
    notes.extend(_notes(section))
    return values


def _refuse(section: Mapping[str, Any], source: str) -> None:
    version = section.get("fsdp_version", 1)  # absent: Accelerate runs FSDP1
    if str(version) != "2":
        raise ConfigError(
            f"{source}: fsdp_config.fsdp_version {version}: accel shards with FSDP2 "
            "(fully_shard) only; set fsdp_version: 2 or launch it with `accelerate launch`"
        )
    for key, why in _REFUSED_WHEN_SET.items():
        if section.get(key) not in (None, False, "", [], "false", "False"):
            raise ConfigError(
                f"{source}: fsdp_config.{key}: {why}; set it to false (or remove it) or "
                "launch it with `accelerate launch`"
            )


def _classes(section: Mapping[str, Any], source: str) -> list[str]:
    raw = section.get("fsdp_transformer_layer_cls_to_wrap")
    if raw is None:
        return []  # Accelerate then wraps the model's _no_split_modules, as accel does
    if isinstance(raw, list):
        raw = ",".join(str(item) for item in raw)
    where = f"{source}: fsdp_config.fsdp_transformer_layer_cls_to_wrap"
    return list(schema.imported("launch.fsdp_layer_classes", str(raw), where))


def _notes(section: Mapping[str, Any]) -> list[str]:
    notes = []
    for key, value in section.items():
        if key in _MAPPED or key in _REFUSED_WHEN_SET or key == "fsdp_sync_module_states":
            continue  # accel always starts every rank from rank 0's weights
        if key in _FSDP1_ONLY:
            notes.append(f"fsdp_config.{key}: ignored with FSDP2, as Accelerate ignores it")
        elif key == "fsdp_state_dict_type" and value == "FULL_STATE_DICT":
            notes.append(
                "fsdp_config.fsdp_state_dict_type FULL_STATE_DICT: accel's checkpoints stay "
                "sharded (torch.distributed.checkpoint); export the whole model with "
                "acc.get_state_dict(model)"
            )
        elif key == "fsdp_cpu_ram_efficient_loading" and value:
            notes.append(
                "fsdp_config.fsdp_cpu_ram_efficient_loading: not used: every rank builds "
                "the model, then prepare() gives every rank rank 0's weights"
            )
        elif key not in ("fsdp_state_dict_type", "fsdp_cpu_ram_efficient_loading"):
            notes.append(f"fsdp_config.{key}: not an FSDP key accel knows; ignored")
    return notes
