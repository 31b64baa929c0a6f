"""The edge of planning: the clock, the environment, the working folder and the GPU
count read once, then handed to the pure :func:`~accel.launch.plan.plan_launch`."""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.launch.plan import LaunchPlan, check_launch, plan_launch
from accel.launch.request import LaunchRequest

if TYPE_CHECKING:
    from accel.config.resolve import ResolvedConfig
    from accel.workspace import Workspace

__all__ = ["dry_run", "prepare"]


def prepare(ws: Workspace, request: LaunchRequest, *, early: bool = False) -> LaunchPlan:
    """The plan of ``request`` in ``ws``; bad input fails before torch is imported.

    ``early``: a run is about to start; with ``launch.preload`` its template starts now.
    """
    from accel import runs

    now = datetime.now(timezone.utc)
    config = ws.config
    check_launch(config, request, os.environ, Path.cwd())
    request.torchrun_logs.check((ws.path, ws.data_path))  # once, before a template starts
    values: dict[str, Any] = {
        "env": os.environ,
        "cwd": Path.cwd(),
        "now": now,
        "run_id": runs.new_run_id(now),
        "workspace": ws.path,
        "runs_dir": ws.runs_dir,
        "cache_dir": ws.cache_dir,
        "python": sys.executable,
    }
    template = early and config.settings.launch.preload
    if template:
        _start_template(config, request, values)
    try:
        return plan_launch(config, request, gpu_count=_gpu_count(config), **values)
    except BaseException:
        if template:
            from accel.launch.preload import discard_early

            discard_early(values["run_id"])  # refused (too few GPUs): its template ends now
        raise


def _start_template(config: ResolvedConfig, request: LaunchRequest, values: Any) -> None:
    """launch.preload: the template imports torch while this process does (GPU count)."""
    from accel.errors import UsageError
    from accel.launch.preload import start_early

    try:
        start_early(plan_launch(config, request, gpu_count=0, **values))
    except UsageError:
        return  # only the GPU count makes this plan valid: the runner starts the template


def _gpu_count(config: ResolvedConfig) -> int:
    if config.settings.launch.use_cpu or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return 0
    import torch

    return int(torch.cuda.device_count())


def dry_run(plan: LaunchPlan) -> dict[str, Any]:
    """What ``accel launch --dry-run`` shows of the plan, every secret hidden (the workers
    get the real values)."""
    from accel._redact import redact_argv, redact_env, redact_mapping

    return {
        "run_id": plan.run_id,
        "worker_command": redact_argv(plan.worker_command),
        "nproc_per_node": plan.nproc_per_node,
        "nnodes": plan.nnodes,
        **({"min_nnodes": plan.min_nodes} if plan.elastic else {}),
        "node_rank": plan.node_rank,
        "scheduler": plan.scheduler,
        "world_size": plan.world_size,
        "role": plan.role,
        "rdzv": {"backend": plan.rdzv_backend, "endpoint": plan.rdzv_endpoint, "id": plan.rdzv_id},
        "rdzv_conf": dict(plan.rdzv_conf),
        "local_addr": plan.local_addr,
        "console_local_ranks": sorted(plan.console_local_ranks)
        if plan.console_local_ranks is not None
        else None,
        "notes": list(plan.notes),
        "max_restarts": plan.max_restarts,
        "stop_grace_period": plan.grace_period,
        "worker_env": redact_env(plan.worker_env),
        "run_dir": str(plan.run_dir),
        "torchrun_log_dir": str(log_dir) if (log_dir := plan.torchrun_logs.log_dir) else None,
        "config": redact_mapping(plan.config),
    }
