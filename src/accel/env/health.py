"""The rules of ``accel env --check``: each thing that makes the environment or the
workspace unhealthy becomes one :class:`~accel.env.report.Problem` with its fix."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from accel._version import UPGRADE_HINT
from accel.devices import gpu_mismatch, workers_for
from accel.env.report import EnvReport, Problem, WorkspaceInfo
from accel.errors import AccelError, WorkspaceError
from accel.workspace import LAYOUT_VERSION, Workspace

if TYPE_CHECKING:
    from accel.clean import WorkspaceScan


def problems(
    ws: Workspace,
    report: EnvReport,
    env: Mapping[str, str] | None = None,
    *,
    scan: WorkspaceScan | None = None,
) -> list[Problem]:
    """Everything that makes the environment or the workspace unhealthy, one per line.

    ``env``: the environment ``accel launch`` would read (SLURM's variables); the
    process's own when not given. ``scan``: the clean scan of ``ws`` when the report's
    walk already read it (else it is read here, when the debris rule needs it).
    """
    found: list[Problem] = []
    workspace = _workspace_problems(ws, report.workspace)
    if report.config.error is None:
        found += _launch_problems(ws, os.environ if env is None else env)
    elif not any(p.kind == "layout" for p in workspace):  # else it was not read: see layout
        found.append(Problem("config", report.config.error, report.config.fix))
    found += workspace
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
        found += [] if foreign else _debris(ws, scan)  # a dead launcher's run is healed
    return found


def _newer(info: WorkspaceInfo) -> bool:
    return info.layout_version is not None and info.layout_version > LAYOUT_VERSION


def _workspace_problems(ws: Workspace, info: WorkspaceInfo) -> list[Problem]:
    found: list[Problem] = []
    try:
        ws.check_layout()
    except AccelError as exc:
        newer = "newer than this accel" in str(exc)
        # as the error says: removed, the folder would no longer read as accel's
        marker = f'{{"layout_version": {LAYOUT_VERSION}}}'
        fix = UPGRADE_HINT if newer else f"echo {shlex.quote(marker)} > {ws.layout_file}"
        found.append(Problem("layout", str(exc), fix))
    else:
        found += _identity_problems(ws)
    if not info.writable:
        verb = "written to" if info.exists else "created"
        read_only = _read_only_mount(Path(info.path))  # no chmod makes it writable
        found.append(
            Problem(
                "workspace_unwritable",
                f"the workspace {info.path} cannot be {verb}"
                + (
                    "; its filesystem is mounted read-only:"
                    if read_only
                    else "; fix its permissions or"
                )
                + " choose another with --workspace or ACCEL_WORKSPACE",
                f"chmod -R u+w {info.path}" if info.exists and not read_only else None,
            )
        )
    return found


def _read_only_mount(path: Path) -> bool:
    """Whether the filesystem ``path`` (or the nearest folder above it that exists) is on
    is mounted read-only."""
    for folder in (path, *path.parents):
        try:
            return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        except OSError:
            continue
    return False


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


def _launch_problems(ws: Workspace, env: Mapping[str, str]) -> list[Problem]:
    """What ``accel launch SCRIPT`` refuses in the configuration itself: the launch plan's
    own checks (the ones ``launch --dry-run`` runs), not a copy of them."""
    from accel.launch.plan import check_config

    try:
        check_config(ws.config, env)
    except AccelError as exc:
        return [Problem("launch", f"accel launch would refuse this configuration: {exc}")]
    return []


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


def _debris(ws: Workspace, found: WorkspaceScan | None) -> list[Problem]:
    import time

    from accel.clean import Policy, protection, scan

    try:
        found = scan(ws, time.time()) if found is None else found
    except WorkspaceError as exc:  # the data folder is a link to one that is gone
        return [Problem("workspace_layout", str(exc))]
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
        Problem("unreadable", _unreadable(item.category, item.detail))
        for item in found.items
        if item.kind == "unreadable"
    ]


def _unreadable(category: str, detail: str | None) -> str:
    if category == "workspace" and detail:  # state.bin: the store's own line says what to do
        return detail
    return f"{detail}: accel neither loads nor deletes it; move it away if it is not needed"


def _debris_kind(category: str) -> str:
    return "torn checkpoint" if category == "checkpoints" else "temporary file"
