"""torchrun's flags that are not accel's own options under another name (pure).

Each keeps torchrun's meaning, checked as torchrun checks it:

- ``--rdzv-conf K=V,...`` goes to torch's c10d rendezvous, as under torchrun; only the
  keys that rendezvous reads are taken (``join_timeout``, ``last_call_timeout``, ...).
- ``--local-addr HOST`` is this node's address in the rendezvous.
- ``--local-ranks-filter 0,1`` shows only those local ranks on the console (logs keep
  every rank), as torchrun's console does.
- ``--shutdown-timeout SECONDS`` is ``--stop-grace-period``.
- ``--run-path`` and ``--start-method``: a script's workers are new processes that run
  the file as ``__main__`` under torchrun and accel alike; the value is checked.
- ``--redirects`` and ``--tee`` choose each local rank's streams that go to files (and,
  redirected and not tee'd, off the console); ``--log-dir`` is where the files go, in
  torchrun's layout (:mod:`accel.runs.torchrun_logs`), with the lines
  ``--duplicate-stdout-filters`` and ``--duplicate-stderr-filters`` pick. Each rank's log
  keeps every stream whatever they say.

The rest change what torchrun's own machinery does where accel has its own; they are
accepted and said in one line each when the run starts (:data:`NOTED`). The table is
checked against the installed torchrun's parser (tests/launch/test_launch_torchrun.py):
a torch release that adds a flag fails it until the flag is placed.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel.errors import UsageError
from accel.runs.torchrun_logs import TorchrunLogs

# What torch's c10d rendezvous reads from its configuration, and the kind of each value.
RDZV_CONF_KEYS = {
    "join_timeout": "int",
    "last_call_timeout": "int",
    "close_timeout": "int",
    "heartbeat_timeout": "int",
    "keep_alive_interval": "int",
    "keep_alive_max_attempt": "int",
    "read_timeout": "int",
    "timeout": "int",
    "is_host": "bool",
}
_BOOLS = ("1", "0", "true", "false", "yes", "no", "y", "n", "on", "off")
START_METHODS = ("spawn", "fork", "forkserver")
DEFAULT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")  # torchrun's, and accel's
NUMA_MODES = ("node", "socket", "exclusive", "core-complex")  # torch.numa.binding's

# torchrun's dest -> what accel does instead, said when the flag is given.
NOTED = {
    "event_log_handler": "accel records the run's events in logs/runs/<run>/run.json",
    "logs_specs": "accel keeps every rank's stdout and stderr in logs/runs/<run>/rank-N.log",
    # without --log-dir (torchrun's files then go to a temporary folder)
    "duplicate_stdout_filters": "with --log-dir the matching lines go to torchrun's "
    "filtered_stdout.log there; every rank's output is in logs/runs/<run>/rank-N.log",
    "duplicate_stderr_filters": "with --log-dir the matching lines go to torchrun's "
    "filtered_stderr.log there; every rank's output is in logs/runs/<run>/rank-N.log",
    "numa_binding": "accel does not bind workers to NUMA nodes; pin them with "
    "`numactl` in a --no-python wrapper",
    "signals_to_handle": "accel stops its workers on SIGTERM, SIGINT, SIGHUP and SIGQUIT "
    "(and SLURM's early-warning signal)",
    "virtual_local_rank": "each worker sees its own LOCAL_RANK and every GPU of --gpu-ids",
    "log_line_prefix_template": "accel prefixes each console line with [rankN] (the "
    "template heads the lines of torchrun's filtered_*.log files)",
}


@dataclass(frozen=True)
class TorchrunFlags:
    """What torchrun's own flags asked for, checked."""

    rdzv_conf: dict[str, str] = field(default_factory=dict)
    local_addr: str | None = None
    local_ranks: frozenset[int] | None = None
    grace: str | None = None  # --shutdown-timeout as a --stop-grace-period
    logs: TorchrunLogs = field(default_factory=TorchrunLogs)  # --log-dir, --redirects, --tee
    notes: list[str] = field(default_factory=list)


def torchrun_flags(params: Mapping[str, Any]) -> TorchrunFlags:
    """The parsed options of ``accel launch`` -> :class:`TorchrunFlags`; UsageError if bad."""
    shown = local_ranks(params.get("local_ranks_filter"))
    logs = TorchrunLogs.parse(
        params.get("log_dir"),
        params.get("redirects"),
        params.get("tee"),
        Path.cwd(),
        duplicate=(params.get("duplicate_stdout_filters"), params.get("duplicate_stderr_filters")),
        shown=shown,
        prefix=params.get("log_line_prefix_template"),
    )
    method = params.get("start_method")
    if method is not None and method not in START_METHODS:
        raise UsageError(f"invalid value for --start-method: expected one of spawn, fork, "
                         f"forkserver, got {method!r}")  # fmt: skip
    mode = params.get("numa_binding")
    if mode is not None and mode not in NUMA_MODES:
        raise UsageError(
            f"invalid value for --numa-binding: expected one of {', '.join(NUMA_MODES)}, "
            f"got {mode!r}"
        )
    timeout = params.get("shutdown_timeout")
    if timeout is not None and timeout < 0:
        raise UsageError(f"invalid value for --shutdown-timeout: expected >= 0, got {timeout}")
    said = {**params}
    if _signals(params.get("signals_to_handle")) == set(DEFAULT_SIGNALS):
        said.pop("signals_to_handle")  # torchrun's default: what accel does
    if logs.log_dir is not None:  # written there, as torchrun writes them
        said.pop("duplicate_stdout_filters", None)
        said.pop("duplicate_stderr_filters", None)
    notes = [
        f"--{dest.replace('_', '-')} is accepted: {why}"
        for dest, why in NOTED.items()
        if said.get(dest) not in (None, False, "")
    ]
    return TorchrunFlags(
        rdzv_conf=rdzv_conf(params.get("rdzv_conf")),
        local_addr=_local_addr(params.get("local_addr")),
        local_ranks=shown,
        grace=None if timeout is None or params.get("grace") else f"{timeout}s",
        logs=logs,
        notes=notes,
    )


def rdzv_conf(text: str | None) -> dict[str, str]:
    """``--rdzv-conf join_timeout=900,is_host=1`` -> its pairs, torchrun's format."""
    out: dict[str, str] = {}
    text = (text or "").strip()
    for pair in text.split(",") if text else ():
        key, sep, value = (part.strip() for part in pair.partition("="))
        kind = RDZV_CONF_KEYS.get(key)
        if kind is None:
            known = ", ".join(RDZV_CONF_KEYS)
            raise UsageError(f"invalid --rdzv-conf {pair!r}: expected KEY=VALUE with KEY one "
                             f"of {known}")  # fmt: skip
        ok = value.isdigit() if kind == "int" else value.lower() in _BOOLS
        if not sep or not ok:
            expected = "a whole number of seconds" if kind == "int" else "1 or 0"
            raise UsageError(f"invalid --rdzv-conf {pair!r}: {key} takes {expected}")
        out[key] = value
    return out


def local_ranks(text: str | None) -> frozenset[int] | None:
    """``--local-ranks-filter 0,2`` -> {0, 2}; None (or empty, as torchrun) shows all."""
    if text is None or not text.strip():
        return None
    try:
        ranks = frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"invalid value for --local-ranks-filter: expected local ranks like "
                         f"0 or 0,1, got {text!r}") from None  # fmt: skip
    if min(ranks) < 0:
        raise UsageError(f"invalid value for --local-ranks-filter: a rank is >= 0, got {text!r}")
    return ranks


def _local_addr(text: str | None) -> str | None:
    if text is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9._:\[\]-]{1,255}", text, re.ASCII):
        raise UsageError(
            f"invalid value for --local-addr: expected a host name or address, got {text!r}"
        )
    return text


def _signals(text: str | None) -> set[str]:
    names = {name.strip() for name in (text or "").split(",")} if text else set()
    for name in sorted(names):
        if name not in signal.Signals.__members__:
            raise UsageError(
                f"invalid value for --signals-to-handle: {name!r} is not a signal name; give "
                "names like SIGTERM,SIGUSR1"
            )
    return names
