"""What a scheduler says about a job's nodes, read from the environment it sets (pure).

SLURM (``SLURM_*``) and SkyPilot (``SKYPILOT_*``): each fills in, under the plan, what no
flag, environment variable or config gave: the nodes, this node's rank, the head
node's rendezvous and, for SkyPilot, the workers per node. torchrun's own ``PET_*``
variables are flags (``accel.cli._launch_pet``), above all of these.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from accel.errors import UsageError

DEFAULT_RDZV_PORT = 29400


# Steps of one allocation that run at once each get a port of their own above this one.
STEP_PORTS = 100
# SLURM's ids of the batch script's and the external step (0xfffffffe, 0xfffffffd, ...).
BATCH_STEPS = 0xFFFFFFF0


def slurm_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """What a SLURM allocation says about the job's nodes (empty outside SLURM).

    One task per node (``srun --ntasks-per-node=1 accel launch ...``) runs the node's
    workers; one task per GPU (``srun -n 8 accel launch ...``: more tasks than nodes)
    makes each task one worker. On one node with one task there is nothing to meet: the
    launch binds a free port of its own, so launches side by side in one allocation (a
    sweep) never share a rendezvous. Across nodes, each job step (each ``srun``,
    ``SLURM_STEP_ID``) gets its own rendezvous id and port, the same on every node of the
    step.
    """
    if not env.get("SLURM_JOB_ID"):
        return {}
    out: dict[str, Any] = {}
    nnodes = env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES")
    if nnodes and nnodes.isdigit():
        out["nnodes"] = int(nnodes)
    if env.get("SLURM_NODEID", "").isdigit():
        out["node_rank"] = int(env["SLURM_NODEID"])
    step = env.get("SLURM_STEP_ID", "")
    if step.isdigit() and int(step) >= BATCH_STEPS:  # the batch script's own "step"
        step = ""
    # srun sets the step's task count; the batch script (which may be asked for many
    # tasks it then hands to srun) is not a task of them.
    tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if step and tasks.isdigit() and int(tasks) > out.get("nnodes", 1):
        # srun started a task per GPU (or per CPU rank): each task is one worker, and
        # the tasks meet as the "nodes" of one job, in the order SLURM numbered them.
        if not env.get("SLURM_PROCID", "").isdigit():
            raise UsageError("SLURM started several tasks per node but SLURM_PROCID is unset")
        out.update(nnodes=int(tasks), node_rank=int(env["SLURM_PROCID"]), nproc=1, unit="task")
        if env.get("SLURM_LOCALID", "").isdigit():
            out["local_rank"] = int(env["SLURM_LOCALID"])
    elif out.get("nnodes", 1) == 1:
        return out
    out["rdzv_id"] = f"slurm-{env['SLURM_JOB_ID']}" + (f".{step}" if step else "")
    nodelist = (
        env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    )
    if nodelist:
        port = DEFAULT_RDZV_PORT + (int(step) % STEP_PORTS if step else 0)
        out["endpoint"] = f"{first_host(nodelist)}:{port}"
    return out


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list, as ``scontrol show hostnames`` gives it:
    ``gpu[07-09,12],cpu1`` -> ``gpu07``; every bracket group of the first name counts,
    ``rack1-[3-4]-n[1-2]`` -> ``rack1-3-n1``."""
    first, depth = [], 0
    for char in nodelist.strip():
        depth += {"[": 1, "]": -1}.get(char, 0)
        if (char == "," and depth == 0) or depth not in (0, 1):
            break
        first.append(char)
    name = "".join(first)
    if not name or depth != 0 or name.startswith("["):
        raise UsageError(f"cannot read the SLURM node list {nodelist!r}")
    return re.sub(r"\[([^\]]*)\]", lambda m: m.group(1).split(",")[0].split("-")[0], name)


def requeue_command(env: Mapping[str, str], which: Callable[[str], str | None]) -> tuple[str, ...]:
    """``scontrol requeue JOB``, what ``--requeue`` runs when a stop asked by SLURM (SIGTERM,
    or the ``--signal=USR1@T`` early warning) has ended the job: the job goes back to the
    queue and, started again, resumes from the checkpoint the workers saved. A job of an
    array is named as ``scontrol`` knows it, ``ARRAYJOB_TASK``. Outside SLURM, or without
    ``scontrol``, the launch is refused before anything starts."""
    job = env.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        raise UsageError(
            "--requeue needs a SLURM job, and SLURM_JOB_ID is not set: run it inside sbatch "
            "(or salloc), or drop --requeue"
        )
    array, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    if array.isdigit() and task.isdigit():
        job = f"{array}_{task}"
    scontrol = which("scontrol")
    if scontrol is None:
        raise UsageError(
            "--requeue needs SLURM's scontrol, which is not on PATH: add SLURM's bin folder "
            "to PATH, or drop --requeue"
        )
    return (scontrol, "requeue", job)


def skypilot_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """What SkyPilot says on each node of a cluster (empty outside SkyPilot): its docs'
    torchrun line is ``--nnodes $SKYPILOT_NUM_NODES --node_rank $SKYPILOT_NODE_RANK
    --nproc_per_node $SKYPILOT_NUM_GPUS_PER_NODE`` with the first of
    ``$SKYPILOT_NODE_IPS`` as the head."""
    ips = [ip.strip() for ip in env.get("SKYPILOT_NODE_IPS", "").splitlines() if ip.strip()]
    if not ips or not env.get("SKYPILOT_NODE_RANK", "").isdigit():
        return {}
    count = env.get("SKYPILOT_NUM_NODES", "")
    out: dict[str, Any] = {
        "nnodes": int(count) if count.isdigit() else len(ips),
        "node_rank": int(env["SKYPILOT_NODE_RANK"]),
    }
    gpus = env.get("SKYPILOT_NUM_GPUS_PER_NODE", "")
    if gpus.isdigit() and int(gpus) > 0:
        out["nproc"] = int(gpus)
    if out["nnodes"] > 1:
        out["endpoint"] = f"{ips[0]}:{DEFAULT_RDZV_PORT}"
        task = env.get("SKYPILOT_TASK_ID", "")
        out["rdzv_id"] = f"skypilot-{task}" if task else "skypilot"
    return out


WORLD = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def world_defaults(env: Mapping[str, str]) -> dict[str, Any]:
    """A world someone else started (a custom launcher, Azure ML, an MPI wrapper): each
    process it starts is one rank, told by torch's own variables ``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` and ``MASTER_PORT``. ``accel launch`` in each runs the script as that
    rank: the ranks meet at the master's address as the "nodes" of one job of one worker
    each. Not inside a worker accel or torchrun started (they set the same variables), nor
    beside torchrun's ``PET_*`` variables (Kubernetes sets both kinds; ``PET_*`` is the job)."""
    if not all(env.get(name) for name in WORLD) or "TORCHELASTIC_RUN_ID" in env:
        return {}
    if any(name.startswith("PET_") for name in env):  # a PyTorchJob pod sets both: its
        return {}  # node-level RANK and WORLD_SIZE, and PET_* for torchrun, which say the job
    rank, size, port = env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]
    if not (rank.isdigit() and size.isdigit() and port.isdigit()):
        raise UsageError(
            f"RANK={rank}, WORLD_SIZE={size}, MASTER_PORT={port} in the environment are not "
            "all numbers: fix the launcher that set them (or unset them to launch here)"
        )
    if int(rank) >= int(size):
        raise UsageError(
            f"RANK={rank} in the environment is not below WORLD_SIZE={size}: the launcher "
            "that set them gave this process no place in its world"
        )
    out: dict[str, Any] = {
        "nnodes": int(size), "node_rank": int(rank), "nproc": 1, "unit": "rank",
        "endpoint": f"{env['MASTER_ADDR']}:{port}", "rdzv_id": f"world-{port}",
    }  # fmt: skip
    if env.get("LOCAL_RANK", "").isdigit():
        out["local_rank"] = int(env["LOCAL_RANK"])
    return out


# The variables each scheduler tells a job's shape in (nodes, this node's rank), by unit.
_TOLD_IN = {
    ("slurm", "node"): ("SLURM_NNODES", "SLURM_NODEID"),
    ("slurm", "task"): ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID"),
    ("skypilot", "node"): ("SKYPILOT_NUM_NODES", "SKYPILOT_NODE_RANK"),
    ("world", "rank"): ("WORLD_SIZE", "RANK"),
}
# Where each scheduler's head (the rendezvous endpoint) is read.
_ENDPOINT_IN = {
    "slurm": "the first host of SLURM_JOB_NODELIST",
    "skypilot": "the first of SKYPILOT_NODE_IPS",
    "world": "MASTER_ADDR and MASTER_PORT",
}


@dataclass(frozen=True)
class Scheduler:
    """The scheduler found in the environment, and what it says about the job."""

    name: str  # skypilot | slurm | world
    says: Mapping[str, Any]  # nnodes, node_rank, endpoint, rdzv_id, nproc: what it set

    def describe(self, endpoint: str | None = None) -> str:
        """``slurm: node 1 of 4, head node-a:29400``, as --dry-run shows it; with the
        rendezvous ``endpoint`` the launch uses when another than the head it names
        (``--rdzv-endpoint``, the config) was given."""
        says = self.says
        unit = says.get("unit", "node")
        parts = [f"{unit} {says.get('node_rank', 0)} of {says.get('nnodes', 1)}"]
        head = says.get("endpoint")
        if endpoint and head and endpoint != head:
            parts.append(f"rendezvous {endpoint} (given; not its head {head})")
        elif head:
            parts.append(f"head {head}")
        if says.get("nproc"):
            parts.append(f"{says['nproc']} worker(s) per {unit}")
        return f"{self.name}: " + ", ".join(parts)

    def told(self, key: str) -> str | None:
        """``SLURM_NODEID=3 (slurm)``: the variable ``key`` (nnodes, node_rank) came from,
        for a refusal to name what the user can check; for ``endpoint``, where the head
        was read (``the first host of SLURM_JOB_NODELIST``)."""
        if key == "endpoint":
            return _ENDPOINT_IN.get(self.name) if key in self.says else None
        names = _TOLD_IN.get((self.name, self.says.get("unit", "node")))
        if names is None or key not in self.says:
            return None
        return f"{names[0 if key == 'nnodes' else 1]}={self.says[key]} ({self.name})"


def detect(env: Mapping[str, str]) -> Scheduler | None:
    """The scheduler this launch runs under, if any (SkyPilot before SLURM: a SkyPilot
    cluster can itself run on SLURM, and its own variables are the job's; a started
    world last: batch scripts export ``MASTER_ADDR`` and ``WORLD_SIZE`` for torchrun)."""
    readers = (
        ("skypilot", skypilot_defaults),
        ("slurm", slurm_defaults),
        ("world", world_defaults),
    )
    for name, read in readers:
        says = read(env)
        if says:
            return Scheduler(name, says)
    return None
