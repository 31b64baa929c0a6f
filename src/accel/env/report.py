"""The report of ``accel env``: frozen dataclasses of raw values (display is the CLI's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.devices import DeviceInfo


@dataclass(frozen=True)
class Problem:
    """One thing ``accel env --check`` fails for; ``kind`` is a stable identifier.

    ``fix``: the command that fixes it (None when only an edit by hand can).
    """

    kind: str
    message: str
    fix: str | None = None


@dataclass(frozen=True)
class TorchInfo:
    version: str | None
    build: str | None  # cpu, cuda or rocm
    cuda: str | None
    hip: str | None
    cudnn: int | None
    backends: Mapping[str, bool]
    error: str | None = None


@dataclass(frozen=True)
class ConfigInfo:
    file: str
    exists: bool
    valid: bool
    error: str | None
    values: Mapping[str, Any]
    origins: Mapping[str, str]
    fix: str | None = None  # the command that repairs the error, when one does


@dataclass(frozen=True)
class WorkspaceInfo:
    path: str
    exists: bool
    writable: bool
    layout_version: int | None
    sizes: Mapping[str, int]
    live_runs: tuple[str, ...]


@dataclass(frozen=True)
class EnvReport:
    accel_version: str
    python: Mapping[str, str]
    platform: Mapping[str, Any]
    torch: TorchInfo
    devices: tuple[DeviceInfo, ...] | None  # None: not probed
    environment: Mapping[str, str]
    packages: Mapping[str, str | None]
    config: ConfigInfo
    workspace: WorkspaceInfo
    problems: tuple[Problem, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["healthy"] = self.healthy
        return data
