"""What a SLURM allocation says about a job's nodes: read from its environment, pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from accel.errors import UsageError

DEFAULT_RDZV_PORT = 29400


# Steps of one allocation that run at once each get a port of their own above this one.
STEP_PORTS = 100


def slurm_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """What a SLURM allocation says about the job's nodes (empty outside SLURM).

    On one node there is nothing to meet: the launch binds a free port of its own, so
    launches side by side in one allocation (a sweep) never share a rendezvous. Across
    nodes, each job step (each ``srun``, ``SLURM_STEP_ID``) gets its own rendezvous id
    and port, the same on every node of the step.
    """
    if not env.get("SLURM_JOB_ID"):
        return {}
    out: dict[str, Any] = {}
    nnodes = env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES")
    if nnodes and nnodes.isdigit():
        out["nnodes"] = int(nnodes)
    if env.get("SLURM_NODEID", "").isdigit():
        out["node_rank"] = int(env["SLURM_NODEID"])
    if out.get("nnodes", 1) == 1:
        return out
    step = env.get("SLURM_STEP_ID", "")
    out["rdzv_id"] = f"slurm-{env['SLURM_JOB_ID']}" + (f".{step}" if step.isdigit() else "")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodelist:
        port = DEFAULT_RDZV_PORT + (int(step) % STEP_PORTS if step.isdigit() else 0)
        out["endpoint"] = f"{first_host(nodelist)}:{port}"
    return out


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu[07-09,12],cpu1`` -> ``gpu07``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if match is None:
        raise UsageError(f"cannot read the SLURM node list {nodelist!r}")
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]
