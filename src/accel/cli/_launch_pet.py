"""torchrun's flags from ``PET_*`` variables, as torchrun reads them.

torchrun takes every flag it does not find on the command line from ``PET_<DEST>``
(``PET_NPROC_PER_NODE``, ``PET_NNODES``, ``PET_MASTER_ADDR``, ...), and the schedulers
that run it lean on that: Kubeflow's PyTorchJob and TrainJob and TorchX set the job's
shape in ``PET_*`` and start ``torchrun`` with no flags at all. Without this, each pod
of a two-pod job would train alone as a world of its own.

The precedence is torchrun's: a flag typed on the command line wins over its variable,
the variable wins over the configuration (torchrun has none: the scheduler's shape is
the job's). Every torchrun variable is applied here; a torch release that adds one fails
tests/launch/test_launch_pet.py until it is placed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import typer

from accel.errors import UsageError

PREFIX = "PET_"

# torchrun's dest -> accel launch's option of the same meaning.
APPLIED = {
    "nnodes": "nnodes",
    "nproc_per_node": "nproc_per_node",
    "node_rank": "node_rank",
    "master_addr": "master_addr",
    "master_port": "master_port",
    "rdzv_backend": "rdzv_backend",
    "rdzv_endpoint": "rdzv_endpoint",
    "rdzv_id": "rdzv_id",
    "standalone": "standalone",
    "max_restarts": "max_restarts",
    "monitor_interval": "monitor_interval",
    "module": "module",
    "no_python": "no_python",
    "role": "role",
    "tee": "tee",
    "rdzv_conf": "rdzv_conf",
    "local_addr": "local_addr",
    "local_ranks_filter": "local_ranks_filter",
    "shutdown_timeout": "shutdown_timeout",
    "start_method": "start_method",
    "run_path": "run_path",
    "event_log_handler": "event_log_handler",
    "duplicate_stdout_filters": "duplicate_stdout_filters",
    "duplicate_stderr_filters": "duplicate_stderr_filters",
    "signals_to_handle": "signals_to_handle",
    "virtual_local_rank": "virtual_local_rank",
    "log_line_prefix_template": "log_line_prefix_template",
    # TorchX's local scheduler sets PET_LOG_DIR for every job, inside its app's folder
    "log_dir": "log_dir",
    "redirects": "redirects",
}


@dataclass(frozen=True)
class FromEnvironment:
    """What the ``PET_*`` variables gave: the options, and what each line shows."""

    params: dict[str, Any] = field(default_factory=dict)  # option -> value, as if typed
    applied: list[tuple[str, str, str]] = field(default_factory=list)  # (var, value, --flag)
    overridden: list[tuple[str, str, str]] = field(default_factory=list)  # the flag won

    def summary(self) -> str | None:
        """One line for a real launch, None when no ``PET_*`` variable is set."""
        parts = [f"{var}={value} ({flag})" for var, value, flag in self.applied]
        if not parts:
            return None
        return "torchrun's variables: " + ", ".join(parts)

    def explain(self, exc: UsageError) -> UsageError:
        """A refusal of a value the user never typed names the variable it came from:
        ``--node-rank 2 is out of range ... (PET_NODE_RANK=2 in the environment)``."""
        said = str(exc)
        named = [f"{var}={value}" for var, value, flag in self.applied if flag in said]
        if not named:
            return exc
        return UsageError(f"{said} ({', '.join(named)} in the environment)")

    def to_json(self) -> list[dict[str, str]]:
        rows = [
            {"variable": v, "value": x, "as": f, "status": "applied"} for v, x, f in self.applied
        ]
        rows += [
            {"variable": v, "value": x, "as": f, "status": "the command line wins"}
            for v, x, f in self.overridden
        ]
        return rows


def from_environment(ctx: typer.Context, env: Mapping[str, str]) -> FromEnvironment:
    """The ``PET_*`` variables of ``env`` as ``accel launch`` options; UsageError (one
    line) for a value torchrun would refuse too."""
    out = FromEnvironment()
    params = {p.name: p for p in ctx.command.params if p.name}
    for dest, name in APPLIED.items():
        var = PREFIX + dest.upper()
        value = env.get(var, "")
        if not value:
            continue
        param = params[name]
        flag = _flag(param)
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            out.overridden.append((var, value, flag))
            continue
        out.params[name] = _convert(param, value, var, flag, ctx)
        _check(name, out.params[name], var, flag)
        out.applied.append((var, value, flag))
    return out


def _flag(param: Any) -> str:
    names = [o for o in param.opts if o.startswith("--")]
    return str(names[0] if names else param.opts[0])


def _convert(param: Any, value: str, var: str, flag: str, ctx: typer.Context) -> Any:
    if getattr(param, "is_flag", False):
        try:  # torchrun's check_env: bool(int(value))
            return bool(int(value))
        except ValueError:
            raise UsageError(
                f"invalid {var}={value!r}: torchrun reads it as {flag} when 1 and not when 0; "
                f"set it to 1 or 0"
            ) from None
    try:
        return param.type.convert(value, param, ctx)
    except typer.BadParameter as exc:
        raise UsageError(f"invalid {var}={value!r} (torchrun's {flag}): {exc.message}") from None


def _check(name: str, value: Any, var: str, flag: str) -> None:
    """Refuse a value as its flag would be refused, naming the variable it came from."""
    from accel.cli._launch_flags import translate
    from accel.cli._launch_torchrun import torchrun_flags
    from accel.config.resolve import flag_value

    try:
        flags = translate({name: value}).flags
        torchrun_flags({name: value})
    except UsageError as exc:
        raise UsageError(f"{var}: {exc}") from None
    for key, each in flags.items():
        if each is not None:
            flag_value(key, each, named=f"{var} (torchrun's {flag})")
