"""What ``accel launch`` itself sets in every worker's environment, over ``--env`` and
``launch.env``, and so refuses to be asked for: it would override the value unseen.

Two sources, each named once. accel's own: :func:`accel_env` (the plan's, on top of
every worker environment) and :func:`run_env` (the runner's, when the run starts).
torch's elastic agent's: :data:`TORCH_AGENT_ENV`, which the agent sets for each worker
(tests/launch checks it against the installed torch's agent; torch is not imported here,
so a dry run and the checks before it stay light). Variables torch passes on from the
launcher's environment (``OMP_NUM_THREADS``, ``TORCH_NCCL_ASYNC_ERROR_HANDLING``) are
the user's to set.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

TORCH_AGENT_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
TORCH_AGENT_PREFIX = "TORCHELASTIC_"  # restart count, run id, error file, agent store, ...


def accel_env(workspace: Path, run_id: str, run_name: str) -> dict[str, str]:
    """Set by the plan over everything else in every worker's environment."""
    return {
        "ACCEL_WORKSPACE": str(workspace),
        "ACCEL_RUN_ID": run_id,
        "ACCEL_RUN_NAME": run_name,
        "PYTHONUNBUFFERED": "1",
    }


def run_env(run_dir: Path, launcher_pid: int, tier: Path | None = None) -> dict[str, str]:
    """Set by the runner when the run starts (the launcher's pid is not the plan's);
    ``ACCEL_SNAPSHOT_DIR``: the memory tier's folder (accel.store.memtier), when it is on."""
    env = {"ACCEL_LAUNCHER_PID": str(launcher_pid), "ACCEL_RUN_DIR": str(run_dir)}
    if tier is not None:
        env["ACCEL_SNAPSHOT_DIR"] = str(tier)
    return env


_ACCEL_NAMES = frozenset(accel_env(Path(), "", "")) | frozenset(run_env(Path(), 0, Path()))


def launcher_sets(name: str) -> bool:
    """Whether the launcher sets ``name`` for every worker itself."""
    return name in _ACCEL_NAMES or name in TORCH_AGENT_ENV or name.startswith(TORCH_AGENT_PREFIX)


def launcher_set(names: Iterable[str]) -> str | None:
    """The first of ``names`` the launcher sets itself, or None."""
    return next((name for name in names if launcher_sets(name)), None)


def refusal(where: str, name: str) -> str:
    """The one line that refuses ``where`` (``--env``, ``launch.env``) setting ``name``."""
    return f"{where} cannot set {name}: accel launch sets it for every worker"
