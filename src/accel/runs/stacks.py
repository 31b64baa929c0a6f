"""``accel stack``: the Python stack of every live rank of a run, dumped on demand.

Each worker started by ``accel launch`` dumps all its threads on SIGUSR1 (see
:mod:`accel.hang`); the dumps also go into the ranks' logs. Ranks run on the launcher's
machine only, so a run of another host is refused.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from accel.errors import AccelError, UsageError
from accel.layout import Layout
from accel.runs.record import read_run, resolve_run_id

__all__ = ["RunStacks", "dump_run_stacks"]


@dataclass(frozen=True)
class RunStacks:
    run_id: str
    pids: dict[int, int]  # rank -> pid
    stacks: dict[int, str]  # rank -> its threads' stacks


def dump_run_stacks(layout: Layout, ref: str | None) -> RunStacks:
    """Dump the stacks of every rank of the live run ``ref`` and append them to its logs."""
    from accel import hang

    latest = ref in (None, "", "latest")  # the newest live run, not the newest run
    run_id = (_newest_live(layout) if latest else None) or resolve_run_id(layout, ref)
    record = read_run(layout, run_id)
    if not record.live:
        raise UsageError(f"run {record.id} is not running ({record.status}); nothing to dump")
    if record.hostname and record.hostname != socket.gethostname():
        raise UsageError(f"run {record.id} runs on {record.hostname}; run `accel stack` there")
    pids = hang.read_workers(record.path)
    if not pids:
        raise AccelError(f"run {record.id} has no workers yet; try again in a moment")
    launcher = record.raw.get("pid")
    launcher_pid = launcher if isinstance(launcher, int) and launcher > 1 else None
    stacks = hang.dump_stacks(record.path, pids, launcher_pid=launcher_pid)
    hang.append_to_rank_logs(record.path, stacks, "accel stack")
    return RunStacks(record.id, pids, stacks)


def _newest_live(layout: Layout) -> str | None:
    """The newest run a launcher holds now (a newer run may have ended since it began)."""
    from accel.runs.live import live_run_ids

    live = sorted(live_run_ids(layout), reverse=True)  # ids begin with their start time
    return live[0] if live else None
