"""What the command line asked of a launch, beyond the config keys its flags set: the
script, its arguments, the console, ``--env`` pairs (checked against what the launcher
sets itself) and the ranks the console shows."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from accel.errors import UsageError
from accel.launch.launcher_env import launcher_set, refusal
from accel.runs.torchrun_logs import TorchrunLogs


@dataclass(frozen=True)
class LaunchRequest:
    """What the command line asked for, beyond the config keys the flags already set."""

    script: str
    script_args: tuple[str, ...] = ()
    module: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)
    console: str = "tee"  # tee | quiet
    console_ranks: frozenset[int] | None = None
    role: str = "default"  # torchrun --role: the workers' ROLE_NAME
    console_local_ranks: frozenset[int] | None = None  # torchrun --local-ranks-filter
    rdzv_conf: Mapping[str, str] = field(default_factory=dict)  # torchrun --rdzv-conf
    local_addr: str | None = None  # torchrun --local-addr
    # torchrun --log-dir, --redirects, --tee (accel.runs.torchrun_logs)
    torchrun_logs: TorchrunLogs = field(default_factory=TorchrunLogs)
    command: tuple[str, ...] = ()  # the launcher's own argv, for the record
    no_python: bool = False  # SCRIPT is a program to run as it is (torchrun --no-python)
    # Hugging Face's --num_processes: the job's total, divided among the nodes.
    total_processes: int | str | None = None
    # HF's --multi_gpu: one worker per GPU unless a count is set somewhere.
    multi_gpu: bool = False
    # --master_addr/--master_port, --main_process_ip/--main_process_port: the rendezvous
    # of a multi-node job (below --rdzv-endpoint); on one node a free port is used.
    main_endpoint: str | None = None
    # Said in one line each once the run starts (what the command line took from PET_*).
    notes: tuple[str, ...] = ()


def parse_env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` (repeatable) -> a mapping; UsageError naming a bad pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        # Only a name is ever shown, never what may be a value: without its '=' a pair
        # may be one, unless it reads as a name (--env HF_TOKEN).
        valid = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None
        if sep and not valid:
            raise UsageError(
                f"invalid --env name {name!r} (letters, digits and '_', not starting with "
                "a digit): give --env KEY=VALUE, e.g. --env A=1"
            )
        if not sep:
            said = f" {name}, which has no '='" if valid else ": an argument without '='"
            raise UsageError(f"invalid --env{said}: give --env KEY=VALUE, e.g. --env A=1")
        if launcher_set([name]):
            raise UsageError(refusal("--env", name))
        out[name] = value
    return out


def parse_ranks(text: str | None) -> frozenset[int] | None:
    """``--ranks 0,2`` -> {0, 2}; None shows every rank."""
    if text is None or text.strip().lower() in ("", "all"):
        return None
    try:
        ranks = frozenset(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise UsageError(f"invalid --ranks {text!r}: expected ranks like 0 or 0,1 or all") from None
    if not ranks or min(ranks) < 0:
        raise UsageError(f"invalid --ranks {text!r}: expected ranks like 0 or 0,1 or all")
    return ranks
