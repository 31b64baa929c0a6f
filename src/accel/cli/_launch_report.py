"""What ``accel launch`` prints about its plan (``--dry-run``) and about a finished run:
the size budget's note, and the verdict, raised as the run's exit code.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from accel.cli import _output
from accel.errors import InterruptedRun, JobFailed
from accel.layout import rank_log
from accel.runs.status import RunStatus

if TYPE_CHECKING:
    from accel.cli._launch_pet import FromEnvironment
    from accel.launch.plan import LaunchPlan
    from accel.launch.runner import RunOutcome
    from accel.workspace import Workspace


def size_budget(ws: Workspace, outcome: RunOutcome) -> None:
    """The size budget when a run ends (see :func:`accel.clean.budget.after_run`)."""
    from accel.clean.budget import OVER, TRIMMED, after_run
    from accel.errors import AccelError
    from accel.units import format_size

    try:
        result = after_run(ws, interrupted=outcome.status == RunStatus.INTERRUPTED)
    except (AccelError, OSError) as exc:
        _output.warn(f"size budget not checked: {exc}")
        return
    if result is None:
        return
    budget = f"cache.max_size {format_size(result.max_size or 0)}"
    if result.action in (TRIMMED, OVER) and result.removed:
        _output.info(
            f"accel: size budget: freed {format_size(result.freed)} in {result.removed} "
            f"item(s), workspace {format_size(result.size_after)} ({budget})"
        )
    if result.action == OVER:
        _output.warn(
            f"the workspace ({format_size(result.size_after)}) stays over {budget}: the rest "
            "is checkpoints, live runs or config (see `accel status`)"
        )


def requeue_after(plan: LaunchPlan, outcome: RunOutcome, argv: tuple[str, ...]) -> None:
    """``--requeue``: a job that SIGTERM (or SLURM's early warning) stopped goes back to
    SLURM's queue; node 0 asks, once. A failure or a crash is not requeued: it would fail
    again, and ``--max-restarts`` is the tool for that."""
    import subprocess

    if not argv or plan.node_rank != 0:
        return
    if outcome.status != RunStatus.INTERRUPTED or outcome.exit_code != 143:
        return
    # Said first: once the requeue is done SLURM ends the job's processes, this one with
    # them, so a line printed after scontrol returns can be lost (it was, under load).
    _output.info(f"accel: requeueing SLURM job {argv[-1]}: it resumes from its newest checkpoint")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _output.warn(f"SLURM job {argv[-1]} not requeued: {exc}")
        return
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        _output.warn(f"SLURM job {argv[-1]} not requeued: scontrol said {said[-1]}")


def report(plan: LaunchPlan, outcome: RunOutcome, ours: Collection[str] = ()) -> int:
    """Say how the run ended; a failure is raised as :class:`JobFailed`. ``ours``: the
    option names of ``accel launch``, to tell one given after the script."""
    from accel.runs import failures
    from accel.runs.record import SPARE_UNUSED

    if outcome.status == RunStatus.SUCCEEDED and outcome.spare:
        _output.info(f"accel: run {outcome.run_id}: {SPARE_UNUSED}")
        return 0
    if outcome.status == RunStatus.SUCCEEDED:
        restarts = f" after {outcome.restarts} restart(s)" if outcome.restarts else ""
        _output.info(f"accel: run {outcome.run_id} succeeded{restarts}")
        return 0
    if outcome.status == RunStatus.INTERRUPTED:
        raise InterruptedRun(
            f"run {outcome.run_id} interrupted; workers stopped", outcome.exit_code
        )
    verdict, root = outcome.verdict, outcome.root
    headline = failures.headline(verdict)
    if outcome.status == RunStatus.HUNG:
        who = f": {headline}" if headline else ""
        raise JobFailed(
            f"run {outcome.run_id} hung and was stopped (--hang-action kill){who}; "
            f"the stacks are above and in the rank logs in {outcome.run_dir}",
            outcome.exit_code,
        )
    if root is None or headline is None:
        raise JobFailed(f"run {outcome.run_id} failed; see {outcome.run_dir}", outcome.exit_code)
    if outcome.diverged is not None:
        raise JobFailed(
            f"run {outcome.run_id} stopped: {outcome.diverged.message} (logs.on_nonfinite: stop)",
            outcome.exit_code,
        )
    crashed = root.type is None and root.traceback  # a fatal signal's stack: never printed
    if crashed or not plan.shows(root.rank):  # show what the console did not
        for line in (root.traceback or "\n".join(outcome.tails.get(root.rank, ()))).splitlines():
            _output.info(f"[rank{root.rank}] {line}")
    for other in verdict.with_fate(failures.ALSO_FAILED):
        _output.info(
            f"accel: rank {other.rank} also failed, after rank {root.rank}: {other.summary}"
        )
    stopped = verdict.ranks(failures.STOPPED)
    if stopped:
        ranks = ", ".join(str(r) for r in stopped)
        _output.info(f"accel: rank(s) {ranks} were stopped by accel after rank {root.rank} failed")
    if root.exitcode == 2:
        misplaced = _misplaced(outcome.tails.get(root.rank, ()), ours)
        if misplaced:
            _output.info(
                f"accel: {' '.join(misplaced)} came after the script, so the script got "
                f"{'it' if len(misplaced) == 1 else 'them'}: "
                "accel launch's options go before the script (accel launch [OPTIONS] SCRIPT "
                "[ARGS]...)"
            )
    raise JobFailed(
        f"{headline}; its log: {outcome.run_dir / rank_log(root.rank)}", outcome.exit_code
    )


def _misplaced(tail: Iterable[str], ours: Collection[str]) -> list[str]:
    """The options of ``accel launch`` that the script's argparse refused as unrecognized
    (``accel launch train.py -n 2``: everything after the script is the script's, as
    under torchrun)."""
    for line in reversed(tuple(tail)):
        refused = line.partition("error: unrecognized arguments: ")[2]
        if refused:
            return [word for word in refused.split() if word.partition("=")[0] in ours]
    return []


def show_plan(
    plan: LaunchPlan,
    as_json: bool,
    pet: FromEnvironment | None = None,
    requeue: tuple[str, ...] = (),
) -> None:
    from accel.launch.prepare import dry_run

    data = {**dry_run(plan), "requeue": list(requeue) or None}
    command, worker_env, config = data["worker_command"], data["worker_env"], data["config"]
    pet_rows = _redacted_rows(pet.to_json()) if pet is not None else []
    if as_json:
        _output.print_json({**data, "from_environment": pet_rows})
        return
    _output.out(f"command    {' '.join(command)}")
    _output.out(
        f"workers    {plan.nproc_per_node} per node x {plan.nodes_text} node(s) = "
        f"{plan.world_size_text} (this is node {plan.node_rank}), role {plan.role!r}"
    )
    if plan.scheduler is not None:
        _output.out(f"scheduler  {plan.scheduler}")
    extra = "".join(f" {k}={v}" for k, v in plan.rdzv_conf.items())
    extra += f" local-addr={plan.local_addr}" if plan.local_addr else ""
    _output.out(f"rendezvous {plan.rdzv_backend} {plan.rdzv_endpoint} id={plan.rdzv_id}{extra}")
    _output.out(f"restarts   {plan.max_restarts}, grace period {plan.grace_period:g}s")
    _output.out(f"logs       {plan.run_dir}")
    if plan.torchrun_logs.log_dir is not None:
        _output.out(f"           and torchrun's files under {plan.torchrun_logs.log_dir}")
    if requeue:
        _output.out(f"requeue    {' '.join(requeue)} (node 0, when SLURM stops the job)")
    for note in plan.notes:
        _output.out(f"note       {note}")
    if pet_rows:
        _output.table(
            "from the environment (torchrun's PET_* variables; a flag typed wins)",
            ["variable", "value", "as", "status"],
            [[r["variable"], r["value"], r.get("as", ""), r["status"]] for r in pet_rows],
        )
    _output.table(
        "environment (added to torchrun's RANK, WORLD_SIZE, MASTER_ADDR, ...)",
        ["variable", "value"],
        sorted(worker_env.items()),
    )
    from accel.config.schema import display

    rows = [
        [f"{s}.{k}", display(f"{s}.{k}", v)]
        for s, body in config.items()
        if isinstance(body, dict)
        for k, v in body.items()
    ]
    _output.table("config", ["key", "value"], rows)


def _redacted_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """A ``PET_*`` value is shown as the worker environment is: secrets hidden."""
    from accel._redact import redact_env

    return [
        {**row, "value": redact_env({row["variable"]: row["value"]})[row["variable"]]}
        for row in rows
    ]
