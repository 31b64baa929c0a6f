"""What FSDP shards and how: one frozen value, from the config or the HF variables (pure).

The launcher exports the resolved ``launch.fsdp*`` keys as the variables Hugging Face
Accelerate's launcher sets (``ACCELERATE_USE_FSDP``, ``FSDP_VERSION``,
``FSDP_AUTO_WRAP_POLICY``, ...), so HF scripts under ``accel launch`` shard too. A
worker's :class:`~accel.Accelerator` reads them back, each variable above its config
key, so a script started by ``accelerate launch`` with an FSDP2 config shards as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel.config import schema
from accel.config.hf_fsdp import HF_WRAP, wrap_name
from accel.config.views import LaunchSettings
from accel.errors import UsageError

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
KEYS = {
    "wrap": "launch.fsdp_wrap",
    "layer_classes": "launch.fsdp_layer_classes",
    "min_params": "launch.fsdp_min_params",
    "reshard_after_forward": "launch.fsdp_reshard_after_forward",
}
_ENV = {
    "wrap": "FSDP_AUTO_WRAP_POLICY",
    "layer_classes": "FSDP_TRANSFORMER_CLS_TO_WRAP",
    "min_params": "FSDP_MIN_NUM_PARAMS",
    "reshard_after_forward": "FSDP_RESHARD_AFTER_FORWARD",
}


@dataclass(frozen=True)
class FsdpSettings:
    """How ``prepare()`` shards a model (see docs/worker-api.md, FSDP).

    ``wrap``: ``transformer`` shards each module whose class is in ``layer_classes``
    (empty: the model's ``_no_split_modules``, else every module of an
    ``nn.ModuleList``), ``size`` each module holding ``min_params`` parameters or more
    that no sharded descendant holds, ``none`` nothing but the root; the root always.
    """

    wrap: str = "transformer"
    layer_classes: tuple[str, ...] = ()
    min_params: int = 100_000_000
    reshard_after_forward: bool = True


def resolve(
    enabled: bool | None, env: Mapping[str, str], launch: LaunchSettings
) -> FsdpSettings | None:
    """The settings when FSDP is on, else None: ``enabled``, else ``ACCELERATE_USE_FSDP``,
    else ``launch.fsdp``. Each ``FSDP_*`` variable wins over its config key."""
    if enabled is None:
        flag = env.get("ACCELERATE_USE_FSDP")
        enabled = _truth("ACCELERATE_USE_FSDP", flag) if flag else bool(launch.fsdp)
    if not enabled:
        return None
    version = env.get("FSDP_VERSION", "2").strip()
    if version != "2":
        raise UsageError(
            f"FSDP_VERSION={version}: accel shards with FSDP2 (fully_shard) only; "
            "set fsdp_version: 2 in the Accelerate config (the same training, the newer API)"
        )
    configured = _configured(launch)
    values = {name: _value(name, env, configured[name]) for name in KEYS}
    return FsdpSettings(
        wrap=str(values["wrap"]),
        layer_classes=tuple(values["layer_classes"]),
        min_params=int(values["min_params"]),
        reshard_after_forward=bool(values["reshard_after_forward"]),
    )


def _truth(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in TRUE + FALSE:
        return lowered in TRUE
    raise UsageError(f"environment variable {name}={text!r} is not true or false")


def _configured(launch: LaunchSettings) -> dict[str, Any]:
    """The ``launch.fsdp_*`` values by their name in :data:`KEYS`."""
    return {
        "wrap": launch.fsdp_wrap,
        "layer_classes": launch.fsdp_layer_classes,
        "min_params": launch.fsdp_min_params,
        "reshard_after_forward": launch.fsdp_reshard_after_forward,
    }


def _value(name: str, env: Mapping[str, str], configured: Any) -> Any:
    """The variable of ``name`` when set, else its ``configured`` value."""
    var, key = _ENV[name], KEYS[name]
    text = env.get(var)
    if text is None or not text.strip():
        return configured
    try:
        if name == "wrap":
            return wrap_name(text)
        return schema.parse_text(schema.BY_KEY[key], text)
    except ValueError as exc:
        raise UsageError(f"environment variable {var}: {exc}") from None


def worker_env(launch: LaunchSettings) -> dict[str, str]:
    """The Hugging Face variables for the workers; ``ACCELERATE_USE_FSDP`` always, so a
    launch flag wins over the project file the workers read."""
    if not launch.fsdp:
        return {"ACCELERATE_USE_FSDP": "false"}
    out = {
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_VERSION": "2",
        "FSDP_AUTO_WRAP_POLICY": HF_WRAP[launch.fsdp_wrap],
        "FSDP_MIN_NUM_PARAMS": str(launch.fsdp_min_params),
        "FSDP_RESHARD_AFTER_FORWARD": "true" if launch.fsdp_reshard_after_forward else "false",
    }
    classes = list(launch.fsdp_layer_classes)
    if classes:
        out["FSDP_TRANSFORMER_CLS_TO_WRAP"] = ",".join(classes)
    return out
