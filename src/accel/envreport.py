"""What ``accel env`` reports: versions, devices, backends, variables, config, workspace.

:func:`collect` gathers everything into a frozen :class:`EnvReport` of raw values; every
part that can fail (torch missing, config invalid, HOME unset, an unreadable folder)
becomes ``None``/an error string plus a :class:`Problem`, never an exception. Secrets
are redacted here (by :mod:`accel._redact`), so no form of the report (text, markdown,
JSON) can show one.

torch is imported inside :func:`torch_info` only. Devices are always listed, by the cheap
probe of :mod:`accel.devices` (NVML or the driver's files: no CUDA initialised), or by
torch itself when asked (``devices=True``).
"""

from __future__ import annotations

import os
import platform as _platform
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from accel._redact import redact_env, redact_mapping, redact_text
from accel._version import __version__
from accel.devices import DeviceInfo, gpu_mismatch, workers_for
from accel.devices import probe as probe_devices
from accel.errors import AccelError, ConfigError
from accel.workspace import LAYOUT_VERSION, Workspace

ENV_PREFIXES = (
    "ACCEL_",
    "ACCELERATE_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "PYTORCH_",
    "TORCHELASTIC_",
    "HIP_",
    "ROCR_",
    "HF_",
    "SLURM_",
)
ENV_NAMES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
)
PACKAGES = ("numpy", "accelerate", "transformers", "safetensors", "filelock", "typer", "rich")


def relevant_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that matter to training, redacted, sorted by name."""
    chosen = {k: v for k, v in env.items() if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}
    return redact_env({k: chosen[k] for k in sorted(chosen)})


# -- the report ---------------------------------------------------------------------------


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
    platform: Mapping[str, str]
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


def collect(ws: Workspace, env: Mapping[str, str], *, devices: bool | None = None) -> EnvReport:
    """Everything ``accel env`` shows; never raises for a broken environment.

    ``devices``: None lists the GPUs with the cheap probe, True asks torch (it
    initialises CUDA), False leaves them out (``None`` in the report).
    """
    torch = torch_info()
    config = config_info(ws)
    found = _devices(torch, env, devices)
    workspace = workspace_info(ws)
    report = EnvReport(
        accel_version=__version__,
        python=python_info(),
        platform=platform_info(),
        torch=torch,
        devices=found,
        environment=relevant_environment(env),
        packages=package_versions(),
        config=config,
        workspace=workspace,
    )
    return replace(report, problems=tuple(problems(ws, report)))


def python_info() -> dict[str, str]:
    return {
        "version": _platform.python_version(),
        "implementation": _platform.python_implementation(),
        "executable": sys.executable or "",
    }


def platform_info() -> dict[str, str]:
    uname = _platform.uname()
    return {
        "system": uname.system,
        "release": uname.release,
        "machine": uname.machine,
        "platform": _platform.platform(),
        "cpu_count": str(os.cpu_count() or ""),
    }


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except Exception:  # noqa: BLE001 - a broken distribution is just "unknown"
            versions[name] = None
    return versions


def torch_info() -> TorchInfo:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
        return TorchInfo(None, None, None, None, None, {}, error=f"{type(exc).__name__}: {exc}")
    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    build = "rocm" if hip else "cuda" if cuda else "cpu"
    return TorchInfo(
        version=str(torch.__version__),
        build=build,
        cuda=cuda,
        hip=hip,
        cudnn=_cudnn_version(torch),
        backends=_backends(torch),
    )


def _cudnn_version(torch: Any) -> int | None:
    try:
        version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001
        return None
    return int(version) if version is not None else None


def _backends(torch: Any) -> dict[str, bool]:
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return {"gloo": False, "nccl": False, "mpi": False}
    return {
        name: bool(getattr(dist, f"is_{name}_available", lambda: False)())
        for name in ("gloo", "nccl", "mpi")
    }


def _devices(
    torch: TorchInfo, env: Mapping[str, str], how: bool | None
) -> tuple[DeviceInfo, ...] | None:
    if how is False:
        return None
    if how is True or torch.build == "rocm":  # the probe knows NVIDIA GPUs only
        return device_info() if torch.error is None else ()
    return probe_devices(env)


def device_info() -> tuple[DeviceInfo, ...]:
    """The visible GPUs (CUDA or ROCm); empty without any. Initialises the driver."""
    try:
        import torch

        if not torch.cuda.is_available():
            return ()
        return tuple(_device(torch, i) for i in range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - a broken driver is reported as no devices
        return ()


def _device(torch: Any, index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    capability = f"{props.major}.{props.minor}" if hasattr(props, "major") else None
    return DeviceInfo(index, str(props.name), int(props.total_memory), capability)


def config_info(ws: Workspace) -> ConfigInfo:
    file = str(ws.config_file)
    exists = ws.config_file.exists()
    try:
        config = ws.config
    except ConfigError as exc:
        return ConfigInfo(file, exists, False, redact_text(str(exc)), {}, {}, config_fix(ws, exc))
    except AccelError as exc:
        return ConfigInfo(file, exists, False, redact_text(str(exc)), {}, {})
    except Exception as exc:  # noqa: BLE001 - e.g. an unreadable user file
        return ConfigInfo(file, exists, False, redact_text(f"{type(exc).__name__}: {exc}"), {}, {})
    values = redact_mapping(config.nested())
    origins = {k: str(o) for k, o in config.origins.items()}
    return ConfigInfo(file, exists, True, None, values, origins)


def config_fix(ws: Workspace, exc: ConfigError) -> str | None:
    """The command that repairs a config error: unset the bad key, or the bad variable."""
    text = str(exc)
    variable = re.match(r"environment variable ([A-Z0-9_]+):", text)
    if variable:
        return f"unset {variable.group(1)}"
    if exc.key and text.startswith(f"{ws.config_file}:"):
        return f"accel config unset {exc.key}"
    return None  # a YAML error, or the user file: an edit by hand, at the line named


def workspace_info(ws: Workspace) -> WorkspaceInfo:
    from accel.runs import live_run_ids
    from accel.status import collect as status

    exists = ws.exists
    layout: int | None = None
    try:
        layout = ws.layout_version()
    except AccelError:
        layout = None
    sizes: dict[str, int] = {}
    live: tuple[str, ...] = ()
    if exists and (layout is None or layout <= LAYOUT_VERSION):
        try:
            st = status(ws, details=False)
            sizes = {p.name: p.size for p in st.parts}
            live = tuple(sorted(live_run_ids(ws.layout)))
        except Exception:  # noqa: BLE001 - e.g. an unreadable folder: report without sizes
            pass
    return WorkspaceInfo(str(ws.path), exists, writable(ws.path), layout, sizes, live)


def writable(path: Path) -> bool:
    """Whether accel could write in ``path`` (or create it, when it does not exist)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    if not probe.is_dir():
        return False
    return os.access(probe, os.W_OK | os.X_OK) and not _read_only_mount(probe)


def _read_only_mount(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & getattr(os, "ST_RDONLY", 1))
    except (OSError, AttributeError):
        return False


# -- health (``--check``) ------------------------------------------------------------------


def problems(ws: Workspace, report: EnvReport) -> list[Problem]:
    """Everything that makes the environment or the workspace unhealthy, one per line."""
    found: list[Problem] = []
    if report.config.error is not None:
        found.append(Problem("config", report.config.error, report.config.fix))
    found += _workspace_problems(ws, report.workspace)
    if report.workspace.exists and report.workspace.writable:
        found += _storage_problems(ws)
    if report.torch.error is not None:
        found.append(
            Problem(
                "torch",
                f"torch cannot be imported ({report.torch.error}); pip install torch",
                "pip install torch",
            )
        )
    found += _gpu_problems(report)
    foreign = any(p.kind == "not_a_workspace" for p in found)
    if report.workspace.exists and report.config.valid and not _newer(report.workspace):
        found += [] if foreign else _debris(ws)  # a dead launcher's run is healed
    return found


def _newer(info: WorkspaceInfo) -> bool:
    return info.layout_version is not None and info.layout_version > LAYOUT_VERSION


def _workspace_problems(ws: Workspace, info: WorkspaceInfo) -> list[Problem]:
    found: list[Problem] = []
    try:
        ws.check_layout()
    except AccelError as exc:
        newer = "newer than this accel" in str(exc)
        fix = "pip install -U accel" if newer else f"rm {ws.layout_file}"
        found.append(Problem("layout", str(exc), fix))
    else:
        found += _identity_problems(ws)
    if not info.writable:
        verb = "written to" if info.exists else "created"
        found.append(
            Problem(
                "workspace_unwritable",
                f"the workspace {info.path} cannot be {verb}; fix its permissions or "
                "choose another with --workspace or ACCEL_WORKSPACE",
                f"chmod -R u+w {info.path}" if info.exists else None,
            )
        )
    return found


MIN_FREE = 16 * 1024**2  # below this, the next checkpoint or run record will not fit


def _storage_problems(ws: Workspace) -> list[Problem]:
    """Parts of the layout that are in the way (a file for a folder, unwritable) and a
    full disk: each would make the next writing command fail."""
    found = []
    for folder in _layout_folders(ws):
        if folder.exists() and not folder.is_dir():
            what = f"{folder} is a file where a folder belongs; move it away"
            found.append(Problem("workspace_layout", what, f"mv {folder} {folder}.moved"))
        elif folder.is_dir() and not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
            what = f"{folder} cannot be read or written; fix its permissions"
            found.append(Problem("workspace_unwritable", what, f"chmod u+rwx {folder}"))
    free = _free_bytes(ws.path)
    if free is not None and free < MIN_FREE:
        where = f"the disk of {ws.path} has {free} bytes free"
        found.append(
            Problem("disk_full", f"{where}; free space (`accel clean`)", "accel clean --yes")
        )
    return found


def _layout_folders(ws: Workspace) -> list[Path]:
    try:
        data = [ws.cache_dir, ws.checkpoints_dir, ws.logs_dir, ws.runs_dir, ws.tmp_dir]
    except AccelError:  # an invalid config cannot say where the data lives
        data = []
    return [ws.config_file.parent, ws.locks_dir, *data]


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _identity_problems(ws: Workspace) -> list[Problem]:
    """A --workspace (or workspace.path) that accel did not make: it would refuse it."""
    refusal = ws.refusal()
    return [] if refusal is None else [Problem("not_a_workspace", refusal)]


def _gpu_problems(report: EnvReport) -> list[Problem]:
    """What ``accel launch`` would refuse for the configured launch values (see devices)."""
    launch = report.config.values.get("launch", {}) if report.config.valid else {}
    if launch.get("use_cpu") or report.devices is None or report.torch.error is not None:
        return []
    found = len(report.devices)
    if report.torch.build == "cpu" and found:
        return [
            Problem(
                "gpus",
                f"{found} GPU(s) visible but torch {report.torch.version} is a CPU build: "
                "workers would train on the CPU; install a CUDA build of torch, or set "
                "launch.use_cpu: true",
                "accel config set launch.use_cpu true",
            )
        ]
    ids = launch.get("gpu_ids")
    gpu_ids = [int(i) for i in ids] if isinstance(ids, list) else None
    configured = launch.get("num_processes", 1)
    problem = gpu_mismatch(workers_for(configured, found, gpu_ids), found, gpu_ids)
    if problem is None and gpu_ids and not found:
        # launch runs these workers on the CPU; the configuration asked for GPUs
        problem = "no GPU is visible, so the workers would run on the CPU: set launch.use_cpu: true"
    if problem is None:
        return []
    shown = ",".join(str(i) for i in gpu_ids) if gpu_ids is not None else "all"
    return [
        Problem(
            "gpus",
            f"launch.num_processes {configured}, launch.gpu_ids {shown}: {problem}",
            _gpu_fix(report.config.origins, gpu_ids, problem),
        )
    ]


def _gpu_fix(origins: Mapping[str, str], gpu_ids: list[int] | None, problem: str) -> str:
    """The command that undoes the setting at fault, where it was made (a variable beats
    the file): the GPU list, else the worker count, else CPU mode."""
    if "use_cpu" in problem:
        return "accel config set launch.use_cpu true"
    key, value = ("launch.gpu_ids", "all") if gpu_ids else ("launch.num_processes", "auto")
    variable = re.match(r"env \((\w+)\)", origins.get(key, ""))
    if variable:
        return f"unset {variable.group(1)}"
    return f"accel config set {key} {value}"


def _debris(ws: Workspace) -> list[Problem]:
    import time

    from accel.clean import Policy, protection, scan

    found = scan(ws, time.time())
    policy = Policy()
    return [
        Problem(
            "debris",
            f"{_debris_kind(item.category)} {item.path} was left by a crash; "
            "`accel clean` removes it",
            "accel clean --yes",
        )
        for item in found.items
        if item.kind == "debris" and protection(item, found, policy, None) is None
    ] + [
        Problem(
            "unreadable",
            f"{item.detail}: accel neither loads nor deletes it; move it away if it is not needed",
        )
        for item in found.items
        if item.kind == "unreadable"
    ]


def _debris_kind(category: str) -> str:
    return "torn checkpoint" if category == "checkpoints" else "temporary file"
