"""Planning a launch: the resolved config + flags + environment -> a frozen :class:`LaunchPlan`.

Pure: the environment, the folder, the clock, the GPU count and the run id come in as
arguments, nothing is read or changed here. The runner applies the plan.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from accel.config.fsdp import worker_env as fsdp_env
from accel.config.resolve import Origin, ResolvedConfig
from accel.config.views import Settings
from accel.devices import gpu_mismatch, workers_for
from accel.errors import ConfigError, UsageError
from accel.launch.launcher_env import accel_env, launcher_set, refusal
from accel.launch.request import LaunchRequest
from accel.launch.schedulers import DEFAULT_RDZV_PORT, Scheduler, detect
from accel.launch.target import check_module
from accel.runs.torchrun_logs import TorchrunLogs
from accel.store.series import series_from_env

BOOTSTRAP = Path(__file__).with_name("_bootstrap.py")
EXEC = "--accel-exec"  # the bootstrap's marker for --no-python (see _bootstrap.py)
OMP_DEFAULT = "1"  # torchrun's OMP_NUM_THREADS for more than one worker per node


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the runner needs; printed as is by ``accel launch --dry-run``."""

    run_id: str
    run_name: str
    started_at: str
    cwd: Path
    workspace: Path
    run_dir: Path
    command: tuple[str, ...]
    entrypoint: str
    worker_args: tuple[str, ...]
    worker_env: Mapping[str, str]
    nproc_per_node: int
    nnodes: int  # the most nodes (torchrun's MAX); exactly this many unless elastic
    node_rank: int
    rdzv_backend: str
    rdzv_endpoint: str
    rdzv_id: str
    rdzv_is_host: bool | None
    max_restarts: int
    grace_period: float
    console: str
    console_ranks: frozenset[int] | None
    config: Mapping[str, Any]
    role: str = "default"  # torchrun --role: the workers' ROLE_NAME
    # The same configuration, typed (what the launcher reads; ``config`` is for show).
    settings: Settings | None = None
    console_local_ranks: frozenset[int] | None = None  # torchrun --local-ranks-filter
    rdzv_conf: Mapping[str, str] = field(default_factory=dict)  # torch's c10d rendezvous
    local_addr: str | None = None  # this node's address in the rendezvous
    # torchrun --log-dir, --redirects, --tee (accel.runs.torchrun_logs)
    torchrun_logs: TorchrunLogs = field(default_factory=TorchrunLogs)
    # launch.preload: workers forked from a template that imported torch (launch/preload.py)
    preload: bool = False
    preload_modules: tuple[str, ...] = ()
    # An elastic job (--nnodes MIN:MAX) starts once min_nodes have joined; None: fixed.
    min_nodes: int | None = None
    # Said in one line each when the run starts (a launch refused before says only why).
    notes: tuple[str, ...] = ()
    # What the scheduler found in the environment said: "slurm: node 1 of 4, head h:29400".
    scheduler: str | None = None
    # The endpoint as a refusal names it, with where it was given (the flag by default).
    rdzv_named: str = ""

    def shows(self, rank: int) -> bool:
        """Whether the console shows ``rank``'s output (its log keeps it all the same):
        ``--quiet``, ``--ranks`` and torchrun's ``--local-ranks-filter`` (each node's
        workers are ranks ``k * nproc_per_node + local rank``)."""
        if self.console == "quiet":
            return False
        if self.console_local_ranks is not None:
            return rank % self.nproc_per_node in self.console_local_ranks
        return self.console_ranks is None or rank in self.console_ranks

    @property
    def elastic(self) -> bool:
        return self.min_nodes is not None and self.min_nodes < self.nnodes

    @property
    def world_size(self) -> int:
        """Workers in the job; of an elastic job, the most it can have (the rendezvous
        decides, attempt by attempt: run.json records each)."""
        return self.nproc_per_node * self.nnodes

    @property
    def nodes_text(self) -> str:
        return f"{self.min_nodes}:{self.nnodes}" if self.elastic else str(self.nnodes)

    @property
    def world_size_text(self) -> str:
        low = self.nproc_per_node * (self.min_nodes or self.nnodes)
        return f"{low} to {self.world_size}" if self.elastic else str(self.world_size)

    @property
    def worker_command(self) -> tuple[str, ...]:
        return (self.entrypoint, *self.worker_args)


def plan_launch(
    config: ResolvedConfig,
    request: LaunchRequest,
    *,
    env: Mapping[str, str],
    cwd: Path,
    now: datetime,
    run_id: str,
    workspace: Path,
    runs_dir: Path,
    cache_dir: Path,
    python: str,
    gpu_count: int,
) -> LaunchPlan:
    """Resolve the launch; :class:`UsageError` for anything that cannot start."""
    _check_target(config, request, cwd, env)
    _check_env(config)
    nodes = _nodes(config, env, request)
    nproc = _nproc(_per_node(config, request, nodes), config, gpu_count)
    _check_shown_ranks(request, nproc, nproc * nodes.nnodes)
    endpoint, rdzv_id, is_host = _rendezvous(config, nodes, run_id, env)
    run_name = _run_name(config, env)
    workers_env = worker_env(config, request, env, nproc, gpu_count, cache_dir)
    workers_env.update(accel_env(workspace, run_id, run_name))
    says = nodes.scheduler.says if nodes.scheduler is not None else {}
    if nproc == 1 and "local_rank" in says:  # the one rank the scheduler started (_bootstrap)
        workers_env["ACCEL_LOCAL_RANK"] = str(says["local_rank"])
    return LaunchPlan(
        run_id=run_id,
        run_name=run_name,
        # this machine's offset, as the attempts' and the end's (runner._now)
        started_at=now.astimezone().isoformat(timespec="milliseconds"),
        cwd=cwd,
        workspace=workspace,
        run_dir=runs_dir / run_id,
        command=request.command,
        entrypoint=python,
        worker_args=_worker_args(request),
        worker_env=workers_env,
        nproc_per_node=nproc,
        nnodes=nodes.nnodes,
        min_nodes=nodes.min_nodes if nodes.min_nodes < nodes.nnodes else None,
        node_rank=nodes.node_rank,
        rdzv_backend="c10d",
        rdzv_endpoint=endpoint,
        rdzv_named=nodes.named(endpoint),
        rdzv_id=rdzv_id,
        rdzv_is_host=is_host,
        max_restarts=int(config.settings.launch.max_restarts),
        grace_period=float(config.settings.launch.stop_grace_period),
        console=request.console,
        console_ranks=request.console_ranks,
        role=request.role,
        console_local_ranks=request.console_local_ranks,
        rdzv_conf=dict(request.rdzv_conf),
        local_addr=request.local_addr,
        torchrun_logs=request.torchrun_logs,
        config=config.nested(),
        settings=config.settings,
        preload=config.settings.launch.preload,
        preload_modules=tuple(config.settings.launch.preload_modules),
        notes=request.notes + _notes(env, workers_env, nproc, nodes.scheduler, endpoint),
        scheduler=nodes.scheduler.describe(endpoint) if nodes.scheduler is not None else None,
    )


def _notes(
    env: Mapping[str, str],
    workers_env: Mapping[str, str],
    nproc: int,
    scheduler: Scheduler | None,
    endpoint: str,
) -> tuple[str, ...]:
    notes = [scheduler.describe(endpoint)] if scheduler is not None else []
    if "OMP_NUM_THREADS" not in env and workers_env.get("OMP_NUM_THREADS") == OMP_DEFAULT:
        notes.append(
            f"OMP_NUM_THREADS={OMP_DEFAULT} for each of the {nproc} workers on this node "
            "(torchrun's default, so they do not oversubscribe the CPUs); set it to tune"
        )
    return tuple(notes)


def check_launch(
    config: ResolvedConfig, request: LaunchRequest, env: Mapping[str, str], cwd: Path
) -> None:
    """The checks of :func:`plan_launch` that need no GPU count: run before importing torch."""
    _check_target(config, request, cwd, env)
    _check_env(config)
    _per_node(config, request, _nodes(config, env, request))


def check_config(config: ResolvedConfig, env: Mapping[str, str]) -> None:
    """What :func:`check_launch` refuses in the configuration alone (``accel env --check``)."""
    _check_env(config)
    _nodes(config, env)


def _check_env(config: ResolvedConfig) -> None:
    """``launch.env`` may not ask for what the launcher sets (``--env``: parse_env_pairs)."""
    name = launcher_set(config.settings.launch.env)
    if name is not None:
        raise ConfigError(refusal("launch.env", name))


def _check_target(
    config: ResolvedConfig, request: LaunchRequest, cwd: Path, env: Mapping[str, str]
) -> None:
    if request.no_python:
        _check_program(request, cwd, env)
        return
    if request.module:
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", request.script):
            raise UsageError(f"-m expects a module name such as pkg.train, got {request.script!r}")
        launched = {**env, **config.settings.launch.env, **request.extra_env}  # the workers'
        check_module(request.script, cwd, launched.get("PYTHONPATH", ""))
        return
    path = Path(request.script)
    path = path if path.is_absolute() else cwd / path
    if path.is_dir() and not (path / "__main__.py").is_file():  # python runs one that has it
        raise UsageError(
            f"{request.script} is a folder with no __main__.py: give the script in it "
            f"({request.script.rstrip('/')}/train.py), or -m for a package (run from {cwd})"
        )
    if not path.is_file() and not path.is_dir():
        raise UsageError(f"no such script: {request.script} (run from {cwd}){_meant(request, cwd)}")
    if path.is_file() and _is_program(path):  # python would stop on its null bytes
        meant = _meant(request, cwd) or (
            f"; give the Python script, or --no-python to start {request.script} itself"
        )
        raise UsageError(f"{request.script} is a program, not a Python script{meant}")


def _is_program(path: Path) -> bool:
    """An executable in the machine's own format (ELF), not a script or a zipapp."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False  # python says what is wrong with it
    try:
        return os.read(fd, 4) == b"\x7fELF"
    except OSError:
        return False
    finally:
        os.close(fd)


# Another launcher's words kept when `accel launch` was put before its line: the word(s)
# typed -> how many of the arguments belong to them
_LAUNCHERS = {
    ("torchrun",): 0,
    ("accelerate", "launch"): 1,
    ("accel", "launch"): 1,
    ("python", "-m", "torch.distributed.run"): 2,
    ("python", "-m", "torch.distributed.launch"): 2,
}


def _meant(request: LaunchRequest, cwd: Path) -> str:
    """What a command line that names no script most likely meant (a habit from
    ``python train.py``, another launcher's line kept after ``accel launch``, or a name
    typed without its ``.py``)."""
    script, args = request.script, request.script_args
    python = re.fullmatch(r"python(\d+(\.\d+)?)?", Path(script).name) is not None
    for words, taken in _LAUNCHERS.items():
        head = ("python" if python else Path(script).name, *args[:taken])
        if head == words:
            from accel._redact import redact_argv

            line = " ".join(shlex.quote(a) for a in redact_argv(args[taken:])) or "SCRIPT"
            typed = " ".join((script, *args[:taken]))
            return f"; drop {typed!r}, accel launch takes its flags itself (accel launch {line})"
    if python and args:
        named = next((a for a in args if not a.startswith("-")), "train.py")
        return (
            f"; drop {Path(script).name!r}, accel starts the script with Python itself "
            f"(accel launch [OPTIONS] {named})"
        )
    if not Path(script).suffix and (cwd / f"{script}.py").is_file():
        return f"; did you mean {script}.py?"
    return _near(script, cwd)


def _near(script: str, cwd: Path) -> str:
    """A script of the same folder whose name is a letter or two away (``Train.py``,
    ``trian.py``): at most 200 names are read, so a huge folder costs nothing."""
    import difflib
    import itertools

    typed = Path(script)
    if typed.suffix != ".py":
        return ""
    try:
        with os.scandir(cwd / typed.parent) as entries:
            names = [e.name for e in itertools.islice(entries, 200) if e.name.endswith(".py")]
    except OSError:
        return ""
    same = [n for n in names if n.lower() == typed.name.lower()]
    close = same or difflib.get_close_matches(typed.name, names, n=1, cutoff=0.8)
    return f"; did you mean {typed.with_name(close[0])}?" if close else ""


def _check_program(request: LaunchRequest, cwd: Path, env: Mapping[str, str]) -> None:
    if request.module:
        raise UsageError("--no-python and -m/--module cannot be used together")
    program = request.script
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise UsageError(f"--no-python: {program} is not an executable file (run from {cwd})")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise UsageError(f"--no-python: no program {program!r} on PATH")


def _worker_args(request: LaunchRequest) -> tuple[str, ...]:
    mode = ("-m",) if request.module else (EXEC,) if request.no_python else ()
    return ("-u", str(BOOTSTRAP), *mode, request.script, *request.script_args)


def _per_node(config: ResolvedConfig, request: LaunchRequest, nodes: _Nodes) -> int | str:
    """Workers per node: ``-n``, or Hugging Face's total divided among the nodes."""
    total = request.total_processes
    if total is None:
        unset = config.origins["launch.num_processes"].layer == "default"
        if unset and request.multi_gpu:
            return "auto"
        said = nodes.scheduler.says.get("nproc") if nodes.scheduler is not None else None
        if unset and said:
            return int(said)
        return config.settings.launch.num_processes
    if total == "auto":
        return total
    if nodes.min_nodes < nodes.nnodes:
        raise UsageError(
            f"--num-processes {total} is a total over a fixed number of nodes, but --nnodes "
            f"{nodes.min_nodes}:{nodes.nnodes} is elastic; give -n/--nproc-per-node per node"
        )
    if int(total) % nodes.nnodes == 0:
        return _checked_per_node(int(total) // nodes.nnodes)
    raise UsageError(
        f"--num-processes {total} is the total over {nodes.nnodes} nodes and does not divide "
        f"evenly; give a multiple of {nodes.nnodes}, or -n/--nproc-per-node per node"
    )


def _checked_per_node(count: int) -> int:
    from accel.config import schema

    try:
        return int(schema.coerce(schema.BY_KEY["launch.num_processes"], count))
    except ValueError as exc:
        raise UsageError(f"--num-processes gives {count} workers per node: {exc}") from None


def _nproc(value: int | str, config: ResolvedConfig, gpu_count: int) -> int:
    """Workers on this node; UsageError (before anything starts) when the GPUs cannot serve
    them: without it, rank 1 of ``-n 2`` on one GPU dies with "invalid device ordinal"."""
    launch = config.settings.launch
    gpu_ids = launch.gpu_ids if isinstance(launch.gpu_ids, list) else None
    nproc = workers_for(value, gpu_count, gpu_ids)
    problem = None if launch.use_cpu else gpu_mismatch(nproc, gpu_count, gpu_ids)
    if problem is not None:
        raise UsageError(problem)
    return nproc


@dataclass(frozen=True)
class _Nodes:
    nnodes: int
    node_rank: int
    endpoint: str | None
    rdzv_id: str | None
    min_nodes: int  # == nnodes unless elastic
    rank_given: bool = True  # by a flag, the environment, the config or the scheduler
    scheduler: Scheduler | None = None  # SLURM or SkyPilot, found in the environment
    endpoint_from: str = "--rdzv-endpoint {}"  # the endpoint ({}) as a refusal names it

    def named(self, endpoint: str) -> str:
        """``endpoint`` as a refusal names it, with where it was given."""
        return self.endpoint_from.replace("{}", endpoint, 1)


def _nodes(
    config: ResolvedConfig, env: Mapping[str, str], request: LaunchRequest | None = None
) -> _Nodes:
    """Nodes from the config, with the scheduler (SLURM, SkyPilot) filling in what was
    not set anywhere."""
    scheduler = detect(env)
    says = scheduler.says if scheduler is not None else {}
    launch = config.settings.launch

    def pick(key: str, value: Any, says_key: str) -> Any:
        unset = config.origins[key].layer == "default"
        return says.get(says_key, value) if unset else value

    nnodes = int(pick("launch.num_machines", launch.num_machines, "nnodes"))
    endpoint = pick("launch.rdzv_endpoint", launch.rdzv_endpoint, "endpoint")
    main = request.main_endpoint if request is not None else None
    origin = config.origins["launch.rdzv_endpoint"]
    endpoint_from = _endpoint_from(origin, scheduler)
    if main and nnodes > 1 and origin.layer != "flag":
        endpoint, endpoint_from = main, "--master-addr/--master-port {}"
    nodes = _Nodes(
        nnodes=nnodes,
        node_rank=int(pick("launch.machine_rank", launch.machine_rank, "node_rank")),
        endpoint=endpoint,
        rdzv_id=pick("launch.rdzv_id", launch.rdzv_id, "rdzv_id"),
        min_nodes=nnodes if launch.min_machines is None else int(launch.min_machines),
        rank_given=config.origins["launch.machine_rank"].layer != "default" or "node_rank" in says,
        scheduler=scheduler,
        endpoint_from=endpoint_from,
    )
    if nodes.min_nodes > nodes.nnodes:
        raise UsageError(
            f"launch.min_machines {nodes.min_nodes} is more than launch.num_machines "
            f"{nodes.nnodes}; give --nnodes MIN:MAX with MIN <= MAX"
        )
    if nodes.node_rank >= nodes.nnodes:
        rank = _told(config, scheduler, "machine_rank", f"--node-rank {nodes.node_rank}")
        count = _told(config, scheduler, "num_machines", f"--nnodes {nodes.nnodes}")
        raise UsageError(f"{rank} is out of range for {count} (expected 0 to {nodes.nnodes - 1})")
    if nodes.nnodes > 1 and not nodes.endpoint:
        size = (
            nodes.nnodes if nodes.min_nodes == nodes.nnodes else f"{nodes.min_nodes}:{nodes.nnodes}"
        )
        raise UsageError(
            f"--nnodes {size} needs --rdzv-endpoint HOST:PORT, the same on every node "
            "(the host of node 0)"
        )
    return nodes


def _rendezvous(
    config: ResolvedConfig, nodes: _Nodes, run_id: str, env: Mapping[str, str]
) -> tuple[str, str, bool | None]:
    endpoint = str(nodes.endpoint or "localhost:0")
    if endpoint.endswith(":0") and nodes.nnodes == 1:
        # Like torchrun --standalone (or HOST:0): the store binds a free port and keeps it.
        return endpoint, nodes.rdzv_id or run_id, True
    if endpoint.endswith(":0"):
        raise UsageError(
            f"{nodes.named(endpoint)}: port 0 picks a free port, which the other nodes "
            "cannot know; give node 0's port, e.g. HOST:29400"
        )
    if not re.search(r":\d+$", endpoint):
        endpoint = f"{endpoint}:{DEFAULT_RDZV_PORT}"
    # With --node-rank, node 0 hosts the store: deterministic even when every node is on
    # one host. Without (torchrun's c10d lines have none), torch decides as under
    # torchrun: a node on the endpoint's machine hosts, or joins when another bound it
    # first. Saying "host" on every node would split an elastic job into lone ones.
    is_host = (nodes.node_rank == 0) if nodes.rank_given else None
    return endpoint, nodes.rdzv_id or "accel", is_host


def _endpoint_from(origin: Origin, scheduler: Scheduler | None) -> str:
    """How a refusal names the endpoint (``{}``) and where it was given: the flag, the
    variable, the config file's line or the scheduler's variable (an imported cluster
    config on a laptop was blamed on an ``--rdzv-endpoint`` nobody typed)."""
    if origin.layer == "env":
        return f"{origin.source}={{}}"
    if origin.layer in ("project", "user"):
        return f"launch.rdzv_endpoint {{}} in {origin.source}" + (
            f":{origin.line}" if origin.line else ""
        )
    told = scheduler.told("endpoint") if scheduler is not None else None
    return f"{{}}, {told}" if origin.layer == "default" and told else "--rdzv-endpoint {}"


def _told(config: ResolvedConfig, scheduler: Scheduler | None, key: str, flag: str) -> str:
    """A value as a refusal names it: the flag, or the scheduler's variable it came from."""
    if scheduler is None or config.origins[f"launch.{key}"].layer != "default":
        return flag
    return scheduler.told("node_rank" if key == "machine_rank" else "nnodes") or flag


def _check_shown_ranks(request: LaunchRequest, nproc: int, world: int) -> None:
    """Ranks to show of which the job has none would hide every line, silently (some of
    them it has: shown, as torchrun's filter shows them, for a line used on any size)."""
    for flag, ranks, limit, has in (
        ("--ranks", request.console_ranks, world, "this job has ranks"),
        ("--local-ranks-filter", request.console_local_ranks, nproc, "each node has local ranks"),
    ):
        beyond = sorted(r for r in ranks or () if r >= limit)
        if beyond and len(beyond) == len(ranks or ()):
            raise UsageError(
                f"{flag} {','.join(map(str, beyond))}: {has} 0 to {limit - 1}; name one "
                f"of them, or leave {flag} out to see every rank"
            )


def _run_name(config: ResolvedConfig, env: Mapping[str, str]) -> str:
    """The checkpoint series: ``--run-name``, else an ``ACCEL_RUN_NAME`` exported in the
    launcher's shell (what a script under torchrun reads, so the two agree), else
    ``launch.run_name``."""
    name = str(config.settings.launch.run_name)
    if config.origins["launch.run_name"].layer == "flag":
        return name
    return series_from_env(name, env)


def worker_env(
    config: ResolvedConfig,
    request: LaunchRequest,
    env: Mapping[str, str],
    nproc: int,
    gpu_count: int,
    cache_dir: Path,
) -> dict[str, str]:
    """Variables added to every worker's environment (torchrun's own and accel's come on
    top)."""
    out: dict[str, str] = {}
    if "OMP_NUM_THREADS" not in env and nproc > 1:
        out["OMP_NUM_THREADS"] = OMP_DEFAULT  # torchrun's default, so as not to oversubscribe
    out.update(_accelerate_env(config, gpu_count))
    out.update(_framework_caches(config, env, cache_dir))
    out.update(config.settings.launch.env)
    out.update(request.extra_env)
    return out


def _accelerate_env(config: ResolvedConfig, gpu_count: int) -> dict[str, str]:
    """What Hugging Face Accelerate's ``Accelerator()`` reads."""
    launch = config.settings.launch
    use_cpu = launch.use_cpu or gpu_count == 0
    out = {
        "ACCELERATE_MIXED_PRECISION": str(launch.mixed_precision),
        "ACCELERATE_USE_CPU": "true" if use_cpu else "false",
    }
    out.update(fsdp_env(launch))
    backend = str(launch.dynamo_backend)
    if backend.lower() != "no":
        out["ACCELERATE_DYNAMO_BACKEND"] = backend.upper()
    gpu_ids = launch.gpu_ids
    if isinstance(gpu_ids, list) and not use_cpu:
        out["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_ids)
    return out


def _framework_caches(
    config: ResolvedConfig, env: Mapping[str, str], cache_dir: Path
) -> dict[str, str]:
    """Inductor/Triton (and opted-in) caches in the workspace, unless the user set them."""
    from accel.frameworks import framework_env

    return framework_env(config.settings.cache.framework_caches, cache_dir, env)
