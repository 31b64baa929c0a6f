"""``accel launch SCRIPT [ARGS]``: start the script as torch.distributed workers.

Parses, plans (pure), runs, renders. torch is imported only once the plan is made.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO, cast

import typer
from typer.core import TyperOption

from accel.cli import _app, _help, _output
from accel.errors import UsageError


def _dashes(name: str) -> str:
    return name.replace("_", "-")


# Everything after SCRIPT belongs to the script, options included. Every flag also
# works with underscores (--nproc_per_node), as torchrun and Accelerate accept both.
CONTEXT = {"allow_interspersed_args": False, "token_normalize_func": _dashes}


_COMPAT = "torchrun and Accelerate spellings"
# Panels of their own: each panel's table is as wide as its own widest option, so the
# long names (--node-rank,--machine-rank) stay whole in an 80-column terminal.
_NODES = "Multi-node"
_FSDP = "FSDP"


def launch(
    ctx: typer.Context,
    script: str = typer.Argument(
        ..., metavar="SCRIPT", help="The training script (or module with -m)."
    ),
    script_args: list[str] = typer.Argument(
        None, metavar="ARGS", help="Passed to the script untouched."
    ),
    nproc_per_node: str | None = typer.Option(
        None,
        "-n",
        "--nproc-per-node",
        metavar="N",
        help=(
            "Workers on this node; `auto` = one per GPU, else one per CPU, as torchrun's "
            "(config launch.num_processes, whose `auto` without a GPU is 1)"
        ),
    ),
    num_processes: str | None = typer.Option(
        None,
        "--num-processes",
        metavar="N",
        help="Workers in the whole job, divided among the nodes (Hugging Face's meaning).",
    ),
    nnodes: str | None = typer.Option(
        None,
        "--nnodes",
        "--num-machines",
        metavar="N",
        help="Nodes in the job: N, or MIN:MAX for an elastic job (torchrun's meaning). "
        "(config launch.num_machines, launch.min_machines)",
        rich_help_panel=_NODES,
    ),
    node_rank: int | None = typer.Option(
        None,
        "--node-rank",
        "--machine-rank",
        metavar="RANK",
        help="This node's rank. (config launch.machine_rank)",
        rich_help_panel=_NODES,
    ),
    rdzv_endpoint: str | None = typer.Option(
        None,
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="Node 0's HOST[:PORT] (c10d; port 29400 by default). (config launch.rdzv_endpoint)",
        rich_help_panel=_NODES,
    ),
    rdzv_id: str | None = typer.Option(
        None,
        "--rdzv-id",
        metavar="ID",
        help="Job id shared by all nodes. (config launch.rdzv_id)",
        rich_help_panel=_NODES,
    ),
    max_restarts: int | None = typer.Option(
        None,
        "--max-restarts",
        metavar="N",
        help="Restarts after a failure. (config launch.max_restarts)",
    ),
    mixed_precision: str | None = typer.Option(
        None,
        "--mixed-precision",
        metavar="MODE",
        help="no, fp16 or bf16. (config launch.mixed_precision)",
    ),
    cpu: bool = typer.Option(False, "--cpu", help="Run on the CPU. (config launch.use_cpu)"),
    gpu_ids: str | None = typer.Option(
        None, "--gpu-ids", metavar="IDS", help="GPUs to use: all or 0,1. (config launch.gpu_ids)"
    ),
    run_name: str | None = typer.Option(
        None,
        "--run-name",
        metavar="NAME",
        help="Series name for checkpoints. (config launch.run_name)",
    ),
    fsdp: bool = typer.Option(
        False,
        "--fsdp",
        help="Shard models with FSDP2 in Accelerator.prepare(); --no-fsdp: don't. "
        "(config launch.fsdp)",
        rich_help_panel=_FSDP,
    ),
    no_fsdp: bool = typer.Option(False, "--no-fsdp", hidden=True),
    preload: bool = typer.Option(
        False,
        "--preload",
        help="Fork workers from a process that has imported torch (faster start); "
        "--no-preload: exec each. (config launch.preload)",
    ),
    no_preload: bool = typer.Option(False, "--no-preload", hidden=True),
    fsdp_wrap: str | None = typer.Option(
        None,
        "--fsdp-wrap",
        metavar="POLICY",
        help="What FSDP shards before the root: transformer, size or none. "
        "(config launch.fsdp_wrap)",
        rich_help_panel=_FSDP,
    ),
    fsdp_layer_classes: str | None = typer.Option(
        None,
        "--fsdp-layer-classes",
        metavar="CLASSES",
        help="Layer classes to shard, e.g. Block,Attention. (config launch.fsdp_layer_classes)",
        rich_help_panel=_FSDP,
    ),
    fsdp_min_params: str | None = typer.Option(
        None,
        "--fsdp-min-params",
        metavar="N",
        help="Parameters of a module sharded by --fsdp-wrap size. (config launch.fsdp_min_params)",
        rich_help_panel=_FSDP,
    ),
    fsdp_reshard_after_forward: str | None = typer.Option(
        None,
        "--fsdp-reshard-after-forward",
        metavar="TRUE|FALSE",
        help="true or false. (config launch.fsdp_reshard_after_forward)",
        rich_help_panel=_FSDP,
    ),
    grace: str | None = typer.Option(
        None,
        "--stop-grace-period",
        metavar="DURATION",
        help="Time workers get after SIGTERM before SIGKILL. (config launch.stop_grace_period)",
    ),
    hang_timeout: str | None = typer.Option(
        None,
        "--hang-timeout",
        metavar="DURATION",
        help="Dump stacks when no rank printed, logged or beat for this long, e.g. 10m. "
        "(config launch.hang_timeout)",
    ),
    hang_action: str | None = typer.Option(
        None,
        "--hang-action",
        metavar="ACTION",
        help="On a hang: warn, or kill the workers like a failure. (config launch.hang_action)",
    ),
    module: bool = typer.Option(False, "--module", "-m", help="SCRIPT is a module: python -m."),
    no_python: bool = typer.Option(
        False, "--no-python", help="SCRIPT is a program to run as it is, not a Python script."
    ),
    env: list[str] = typer.Option(
        None,
        "--env",
        "-e",
        metavar="KEY=VALUE",
        help="KEY=VALUE for every worker (repeatable). (config launch.env)",
    ),
    quiet: bool = typer.Option(
        False,
        "--quiet",
        help="Show no worker output on the console (logs keep it all); on an Accelerate "
        "command line, Accelerate's meaning.",
    ),
    ranks: str | None = typer.Option(
        None,
        "--ranks",
        metavar="RANKS",
        help="Console shows only these ranks, e.g. 0 (a failure always shows).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the command, environment and config; start nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="With --dry-run: one JSON object."),
    config_file: Path | None = typer.Option(
        None,
        "--config-file",
        metavar="PATH",
        help="Use this Hugging Face Accelerate config for this launch (as `accel config "
        "import` reads it); flags still win.",
        rich_help_panel=_COMPAT,
    ),
    standalone: bool = typer.Option(
        False,
        "--standalone",
        help="One node, rendezvous on a free port (what accel does on one node anyway).",
        rich_help_panel=_COMPAT,
    ),
    master_addr: str | None = typer.Option(
        None,
        "--master-addr",
        metavar="HOST",
        help="torchrun: host of node 0 of a multi-node job (one node binds a free port).",
        rich_help_panel=_COMPAT,
    ),
    master_port: int | None = typer.Option(
        None,
        "--master-port",
        metavar="PORT",
        help="torchrun: port of node 0 of a multi-node job (default 29500).",
        rich_help_panel=_COMPAT,
    ),
    main_process_ip: str | None = typer.Option(
        None,
        "--main-process-ip",
        metavar="HOST",
        help="Accelerate: host of node 0 of a multi-node job (one node binds a free port).",
        rich_help_panel=_COMPAT,
    ),
    main_process_port: int | None = typer.Option(
        None,
        "--main-process-port",
        metavar="PORT",
        help="Accelerate: port of node 0 of a multi-node job (default 29500).",
        rich_help_panel=_COMPAT,
    ),
    rdzv_backend: str | None = typer.Option(
        None,
        "--rdzv-backend",
        metavar="BACKEND",
        help="c10d (static is accepted: accel's rendezvous is always c10d).",
        rich_help_panel=_COMPAT,
    ),
    multi_gpu: bool = typer.Option(
        False,
        "--multi-gpu",
        help="One worker per GPU unless a count is given (-n, --num-processes or config).",
        rich_help_panel=_COMPAT,
    ),
    dynamo_backend: str | None = typer.Option(
        None,
        "--dynamo-backend",
        metavar="BACKEND",
        help="torch.compile backend for Accelerate scripts. (config launch.dynamo_backend)",
        rich_help_panel=_COMPAT,
    ),
    tee: str | None = typer.Option(
        None,
        "--tee",
        "-t",
        metavar="STREAMS",
        help="torchrun: streams also written to --log-dir, kept on the console: 0-3 "
        "(none, stdout, stderr, both) or LOCAL_RANK:N pairs like 0:3,1:1.",
        rich_help_panel=_COMPAT,
    ),
    redirects: str | None = typer.Option(
        None,
        "--redirects",
        "-r",
        metavar="STREAMS",
        help="torchrun: streams written to --log-dir instead of the console (as --tee); "
        "each rank's log keeps all.",
        rich_help_panel=_COMPAT,
    ),
    log_dir: str | None = typer.Option(
        None,
        "--log-dir",
        metavar="PATH",
        help="torchrun: write the --redirects and --tee streams here, in torchrun's layout.",
        rich_help_panel=_COMPAT,
    ),
    role: str | None = typer.Option(
        None,
        "--role",
        metavar="NAME",
        help="torchrun: the workers' role, in their ROLE_NAME (default: default).",
        rich_help_panel=_COMPAT,
    ),
    rdzv_conf: str | None = typer.Option(
        None,
        "--rdzv-conf",
        metavar="KEY=VALUE",
        help="torchrun: settings of the c10d rendezvous, comma-separated (join_timeout=900).",
        rich_help_panel=_COMPAT,
    ),
    local_addr: str | None = typer.Option(
        None,
        "--local-addr",
        metavar="HOST",
        help="torchrun: this node's address in the rendezvous.",
        rich_help_panel=_COMPAT,
    ),
    local_ranks_filter: str | None = typer.Option(
        None,
        "--local-ranks-filter",
        metavar="RANKS",
        help="torchrun: console shows only these local ranks, e.g. 0 (logs keep all).",
        rich_help_panel=_COMPAT,
    ),
    shutdown_timeout: int | None = typer.Option(
        None,
        "--shutdown-timeout",
        metavar="SECONDS",
        help="torchrun: --stop-grace-period in seconds.",
        rich_help_panel=_COMPAT,
    ),
    start_method: str | None = typer.Option(
        None,
        "--start-method",
        metavar="METHOD",
        help="torchrun: spawn, fork or forkserver; a script's workers are new processes "
        "either way (for a faster start: --preload).",
        rich_help_panel=_COMPAT,
    ),
    run_path: bool = typer.Option(
        False,
        "--run-path",
        help="torchrun: run SCRIPT as a file (what accel does with a path).",
        rich_help_panel=_COMPAT,
    ),
    # torchrun's flags for its own machinery: accepted, said what accel does instead.
    event_log_handler: str | None = typer.Option(None, "--event-log-handler", hidden=True),
    logs_specs: str | None = typer.Option(None, "--logs-specs", hidden=True),
    duplicate_stdout_filters: str | None = typer.Option(
        None, "--duplicate-stdout-filters", hidden=True
    ),
    duplicate_stderr_filters: str | None = typer.Option(
        None, "--duplicate-stderr-filters", hidden=True
    ),
    numa_binding: str | None = typer.Option(None, "--numa-binding", hidden=True),
    signals_to_handle: str | None = typer.Option(None, "--signals-to-handle", hidden=True),
    virtual_local_rank: bool = typer.Option(False, "--virtual-local-rank", hidden=True),
    log_line_prefix_template: str | None = typer.Option(
        None, "--log-line-prefix-template", hidden=True
    ),
    # `python -m torch.distributed.launch --use-env`: LOCAL_RANK in the environment and no
    # --local-rank argument, which is what torchrun and accel do anyway
    use_env: bool = typer.Option(False, "--use-env", hidden=True),
    print_completion: str | None = typer.Option(
        None,
        "--print-completion",
        hidden=True,
        is_eager=True,
        callback=lambda value: _print_completion(value),
    ),
    monitor_interval: float | None = typer.Option(
        None,
        "--monitor-interval",
        metavar="SECONDS",
        help="Accepted for torchrun; accel checks the workers every 0.1 s.",
        rich_help_panel=_COMPAT,
    ),
    # Accelerate's flags that it passes to its Accelerator as variables, passed the same
    # way (hidden: too long for the help table; docs/commands/launch.md lists them).
    num_cpu_threads_per_process: int | None = typer.Option(
        None, "--num-cpu-threads-per-process", min=1, hidden=True
    ),
    dynamo_mode: str | None = typer.Option(None, "--dynamo-mode", hidden=True),
    dynamo_use_fullgraph: bool = typer.Option(False, "--dynamo-use-fullgraph", hidden=True),
    dynamo_use_dynamic: bool = typer.Option(False, "--dynamo-use-dynamic", hidden=True),
    dynamo_use_regional_compilation: bool = typer.Option(
        False, "--dynamo-use-regional-compilation", hidden=True
    ),
    debug: bool = typer.Option(False, "--debug", hidden=True),
    use_fsdp: bool = typer.Option(
        False, "--use-fsdp", help="Accelerate: --fsdp.", rich_help_panel=_COMPAT
    ),
    fsdp_version: str | None = typer.Option(
        None,
        "--fsdp-version",
        metavar="VERSION",
        help="Accelerate: 2 (accel shards with FSDP2 only).",
        rich_help_panel=_COMPAT,
    ),
    # Accelerate's spellings of the --fsdp-* options (hidden: the same options).
    fsdp_auto_wrap_policy: str | None = typer.Option(None, hidden=True),
    fsdp_transformer_layer_cls_to_wrap: str | None = typer.Option(None, hidden=True),
    fsdp_min_num_params: str | None = typer.Option(None, hidden=True),
    requeue: bool = typer.Option(
        False,
        "--requeue",
        help="SLURM: when SIGTERM (or --signal=USR1@T) stops the job, requeue it "
        "(scontrol requeue): it starts again and resumes from its newest checkpoint.",
    ),
) -> int:
    """Start SCRIPT as N torch.distributed workers on this node, or join a multi-node job.

    torchrun's and Accelerate's flags keep their meaning; `_` works for `-` (--nproc_per_node).
    """
    from accel.cli._launch_accelerate import checked
    from accel.cli._launch_flags import accelerate_env, translate
    from accel.cli._launch_pet import from_environment
    from accel.cli._launch_torchrun import torchrun_flags
    from accel.launch.prepare import prepare
    from accel.launch.request import LaunchRequest, parse_env_pairs, parse_ranks

    if as_json and not dry_run:  # a script reading the plan must not start a run instead
        raise UsageError("--json prints the plan of --dry-run: add --dry-run (a run has no JSON)")
    pet = from_environment(ctx, os.environ)  # torchrun's PET_* variables (Kubernetes, TorchX)
    params = {**ctx.params, **pet.params}
    said = pet.summary()
    try:
        given = translate(params)
        theirs = torchrun_flags(params)
        hf = checked(params, ctx.meta.get(_GIVEN, {}))
    except UsageError as exc:
        raise pet.explain(_as_typed(exc, ctx)) from None
    flags = {**hf.flags, **given.flags}
    if theirs.grace is not None:
        flags["launch.stop_grace_period"] = theirs.grace
    for note in given.notes:
        _output.warn(f"{config_file}: {note}")
    requeue_argv: tuple[str, ...] = ()
    if requeue:
        import shutil

        from accel.launch.schedulers import requeue_command

        requeue_argv = requeue_command(os.environ, shutil.which)
    args = tuple(script_args or ())
    if args[:1] == ("--",):  # torchrun's parser drops a `--` right after the script, that one
        args = args[1:]
    request = LaunchRequest(
        script=script,
        script_args=args,
        module=params["module"],
        extra_env={
            **given.file_env,
            **accelerate_env(params),
            **hf.env,
            **parse_env_pairs(env or []),
        },
        console="quiet" if hf.quiet else "tee",
        role=params["role"] if params["role"] is not None else "default",
        console_ranks=parse_ranks(ranks),
        console_local_ranks=theirs.local_ranks,
        rdzv_conf=theirs.rdzv_conf,
        local_addr=theirs.local_addr,
        torchrun_logs=theirs.logs,
        command=("accel", *sys.argv[1:]),
        no_python=params["no_python"],
        total_processes=given.total_processes,
        multi_gpu=given.multi_gpu,
        main_endpoint=given.main_endpoint,
        notes=tuple(
            n
            for n in (said, *theirs.notes, *hf.notes, _requeue_note(requeue_argv))
            if n is not None
        ),
    )
    ws = _app.workspace(ctx, flags=flags)
    try:
        plan = prepare(ws, request, early=not dry_run)
    except UsageError as exc:
        raise pet.explain(_as_typed(exc, ctx)) from None
    if dry_run:
        from accel.cli._launch_report import show_plan

        show_plan(plan, as_json, pet, requeue_argv)
        return 0
    from accel.cli._launch_report import report, requeue_after, size_budget
    from accel.cli._worker_console import WorkerConsole
    from accel.launch.preload import discard_early
    from accel.launch.runner import launch as run_plan

    console = WorkerConsole(plan.world_size, stderr=cast(TextIO, _CurrentStderr()))

    def notify(message: str) -> None:
        console.end_line()
        _output.info(message)

    try:
        outcome = run_plan(plan, ws, sink=console, notify=notify)  # it says "accel: run ..."
    finally:
        # The run is over (recorded, when it began), every file closed and every lock
        # released, whether it came to a verdict or raised (a rendezvous that timed
        # out): the interpreter's teardown of torch is skipped. After an interrupted run
        # it aborted the launcher once in CI ("terminate called without an active
        # exception", exit -6 where 143 was due): a C++ thread destroyed at exit. The
        # exit handlers are skipped with it: an early template no run used ends here.
        discard_early(plan.run_id)
        _app.options(ctx).fast_exit = True
    console.end_line()
    size_budget(ws, outcome)
    requeue_after(plan, outcome, requeue_argv)
    ours = {name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)}
    return report(plan, outcome, ours)


_GIVEN = "accel.launch.accelerate"  # ctx.meta: values of the flags LaunchCommand adds


class LaunchCommand(_help.Command):
    """``accel launch``, with every other flag of ``accelerate launch`` added hidden (the
    table in :mod:`accel.cli._launch_accelerate` decides what each does), and ``-q``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from accel.cli._launch_accelerate import generated

        for name, placement in generated().items():
            self.params.append(_hidden(f"--{_dashes(name)}", placement.switch))
        self.params.append(_hidden("-q", True, "short_quiet"))


def _as_typed(exc: UsageError, ctx: typer.Context) -> UsageError:
    """A refusal names the option as the user typed it (``--nnodes 0``, not the
    ``--num-machines`` its config key is spelt as), when they typed another of its names."""
    said = str(exc)
    argv = _app.options(ctx).argv
    for param in ctx.command.params:
        named = next((opt for opt in param.opts if f"{opt}:" in said or f"{opt} " in said), None)
        if named is None:
            continue
        for opt in param.opts:  # the name typed, in either spelling (`_` for `-`)
            spellings = (opt, opt[:2] + opt[2:].replace("-", "_"))
            if opt not in said and any(a.split("=", 1)[0] in spellings for a in argv):
                return UsageError(said.replace(named, opt, 1))
        return exc
    return exc


def _hidden(option: str, switch: bool, name: str | None = None) -> TyperOption:
    return TyperOption(
        param_decls=[option] if name is None else [name, option],
        is_flag=switch, default=False if switch else None, hidden=True,
        expose_value=False, callback=_keep,
    )  # fmt: skip


def _keep(ctx: typer.Context, param: Any, value: Any) -> Any:
    if value not in (None, False) and param.name is not None:
        ctx.meta.setdefault(_GIVEN, {})[param.name] = value
    return value


def _print_completion(shell: str | None) -> None:
    """torchrun's ``--print-completion SHELL``: the completion script, then exit; accel's,
    which completes ``accel launch`` and every other command."""
    if shell is None:
        return
    from accel.cli import _completion

    if shell not in _completion.SHELLS:
        raise UsageError(
            f"--print-completion {shell}: accel completes {', '.join(_completion.SHELLS)}"
        )
    _output.raw(_completion.script(shell))
    raise typer.Exit(0)


def _requeue_note(argv: tuple[str, ...]) -> str | None:
    if not argv:
        return None
    return f"if SLURM stops the job, node 0 requeues it (scontrol requeue {argv[-1]})"


class _CurrentStderr:
    """``sys.stderr`` as it is at each write. During a run the runner sends file
    descriptor 2 to ``launcher.log`` (torch's C++ traces) and points ``sys.stderr`` at
    the console: workers' stderr must follow it there."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stderr, name)
