"""Typed views of a resolved configuration: ``settings.checkpoints.keep_last``.

Code reads configuration through these frozen views instead of string keys, so a
misspelt key is a type error, not a ``KeyError`` at run time, and a store can be given
exactly the section it needs (``Checkpoints(layout, settings.checkpoints)``). The
views hold the values :mod:`accel.config.resolve` already validated; they add no rule
of their own. ``tests/config/test_views.py`` checks that they cover the schema exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar


@dataclass(frozen=True)
class LaunchSettings:
    num_processes: int | str
    num_machines: int
    min_machines: int | None
    machine_rank: int
    rdzv_endpoint: str | None
    rdzv_id: str | None
    max_restarts: int
    mixed_precision: str
    use_cpu: bool
    gpu_ids: str | list[int]
    env: dict[str, str]
    run_name: str
    dynamo_backend: str
    fsdp: bool
    fsdp_wrap: str
    fsdp_layer_classes: list[str]
    fsdp_min_params: int
    fsdp_reshard_after_forward: bool
    stop_grace_period: float
    hang_timeout: float | None
    hang_action: str
    preload: bool
    preload_modules: list[str]


@dataclass(frozen=True)
class CheckpointSettings:
    keep_last: int | None
    async_save: bool
    collective_timeout: float
    arrival_timeout: float
    snapshot_every: int | None
    persist_every: int | None


@dataclass(frozen=True)
class CacheSettings:
    max_size: int | None
    framework_caches: list[str]


@dataclass(frozen=True)
class LogSettings:
    level: str
    rotate_max_bytes: int
    backup_count: int
    resource_interval: float
    on_nonfinite: str


@dataclass(frozen=True)
class StoreSettings:
    lock_timeout: float


@dataclass(frozen=True)
class WorkspaceSettings:
    path: str | None


@dataclass(frozen=True)
class Settings:
    """Every section of the configuration, typed."""

    launch: LaunchSettings
    checkpoints: CheckpointSettings
    cache: CacheSettings
    logs: LogSettings
    store: StoreSettings
    workspace: WorkspaceSettings

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Settings:
        """The views of flat, validated ``values`` by dotted key (``ResolvedConfig.values``)."""
        return cls(
            launch=_section(LaunchSettings, "launch", values),
            checkpoints=_section(CheckpointSettings, "checkpoints", values),
            cache=_section(CacheSettings, "cache", values),
            logs=_section(LogSettings, "logs", values),
            store=_section(StoreSettings, "store", values),
            workspace=_section(WorkspaceSettings, "workspace", values),
        )


_View = TypeVar("_View")


def _section(view: type[_View], section: str, values: Mapping[str, Any]) -> _View:
    return view(**{f.name: values[f"{section}.{f.name}"] for f in fields(view)})  # type: ignore[arg-type]
