"""How each rank of an attempt ended: torch's failure reports, the launcher's exit watch
and the crash dumps of faulthandler, merged into :class:`RankFailure` s for blame."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from accel.errors import JobFailed
from accel.launch.deaths import ExitWatch
from accel.launch.teardown import Returned
from accel.runs.failures import RankFailure

__all__ = ["launch_error", "rank_ends", "with_crashes"]

SETTLE_TIMEOUT = 2.0  # seconds for the exit watch to note ends torch has already reaped


def rank_ends(
    attempt: int,
    failures: Mapping[int, Any],
    pids: Mapping[int, int],
    exits: ExitWatch,
    finished: Mapping[int, Returned] | None = None,
) -> list[RankFailure]:
    """How each rank of the attempt ended: torch's failures, with the exit watch's times.

    Ranks torch did not report (stopped before it looked, or in older torch versions)
    come from the exit watch alone; ranks that exited 0 are left out, and so are those
    in ``finished`` (rank -> how its script returned) whose script returned 0 before
    torch's teardown hung or killed them (:mod:`accel.launch.teardown`). One whose script
    exited non-zero failed when it exited, with its code and message, whatever ended
    its process after (accel's stop may reach it in its exit handlers).
    """
    exits.settle(SETTLE_TIMEOUT)
    seen = dict(exits.exits())
    finished = finished or {}
    for rank, returned in finished.items():
        if rank in seen:
            seen[rank] = replace(seen[rank], exitcode=returned.code)
    out = []
    for rank in sorted(set(pids) | set(failures)):
        ended = seen.get(rank)
        failure = failures.get(rank)
        if failure is not None:
            out.append(_rank_failure(rank, failure, attempt, ended))
        elif ended is None or ended.exitcode != 0:
            out.append(
                RankFailure(
                    rank=rank,
                    local_rank=rank,
                    pid=pids.get(rank),
                    exitcode=ended.exitcode if ended else None,
                    attempt=attempt,
                    timestamp=ended.at if ended else time.time(),
                    died_at=ended.at if ended else None,
                )
            )
    return [_exited(end, finished[end.rank]) if end.rank in finished else end for end in out]


def _exited(end: RankFailure, returned: Returned) -> RankFailure:
    """``end`` of a rank whose script exited with ``returned.code``: failed then, if not 0."""
    if returned.code == 0:
        return end
    end = replace(end, exitcode=returned.code, raised_at=returned.returned_at)
    if returned.message and end.type is None:  # sys.exit("...") said why
        end = replace(end, type="SystemExit", message=returned.message)
    return end


def with_crashes(ends: list[RankFailure], run_dir: Path, since: float) -> list[RankFailure]:
    """Ranks killed by a fatal signal gain the stack faulthandler wrote, and its time.

    The dump is written the instant the rank crashed, before a core dump delays its
    end: that time, not the exit's, orders it before the errors it caused in peers.
    """
    from accel.hang import append_to_rank_logs, read_crash

    out = []
    for end in ends:
        crash = read_crash(run_dir, end.rank, since) if end.type is None else None
        if crash is not None and (end.exitcode is None or end.exitcode < 0):
            end = replace(end, raised_at=crash[0], traceback=crash[1])
            append_to_rank_logs(run_dir, {end.rank: crash[1]}, "fatal signal; Python stacks")
        out.append(end)
    return out


def _rank_failure(rank: int, failure: Any, attempt: int, ended: Any) -> RankFailure:
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    ours = data.get("accel") if isinstance(data.get("accel"), dict) else None
    theirs = data.get("message") if isinstance(data.get("message"), dict) else {}
    extra = theirs.get("extraInfo", {}) if isinstance(theirs, dict) else {}
    kind, message, trace = None, None, None
    if ours:
        kind, message, trace = ours.get("type"), ours.get("message"), ours.get("traceback")
    elif theirs:  # written by torch's @record in the script: "ValueError: the message"
        kind, message = _type_and_message(theirs.get("message"))
        trace = extra.get("py_callstack")
    stamp = ours.get("time") if ours else None
    raised = float(stamp) if isinstance(stamp, (int, float)) else None
    exitcode = int(failure.exitcode) if failure.exitcode is not None else None
    return RankFailure(
        rank=rank,
        local_rank=int(failure.local_rank),
        pid=int(failure.pid) if failure.pid is not None else None,
        exitcode=exitcode,
        attempt=attempt,
        timestamp=float(failure.timestamp),
        type=kind,
        message=message,
        traceback=trace,
        raised_at=raised,
        died_at=ended.at if ended is not None else None,
    )


def _type_and_message(said: Any) -> tuple[str | None, str | None]:
    """torch's ``f"{type(e).__name__}: {e}"`` split back, so a script with ``@record``
    is summarized as one without (its type read as a signal's stack printed it twice)."""
    if not isinstance(said, str):
        return None, None
    kind, sep, message = said.partition(": ")
    if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,200}", kind):
        return kind, message
    return None, said


def launch_error(
    exc: BaseException, log: Path, endpoint: str | None = None, spare: bool = False
) -> BaseException:
    """A torch.distributed error of the launcher itself (the rendezvous, before the
    workers or between their attempts): what it means for the job, in one line.
    ``spare``: this node waited as a spare, no worker having run here."""
    name = type(exc).__name__
    if not type(exc).__module__.startswith("torch.distributed"):
        return exc
    if name == "RendezvousTimeoutError":
        said = f" ({exc})" if str(exc) else ""  # torch 2.13's says nothing
        return JobFailed(f"the other nodes did not join the rendezvous in time{said}; see {log}")
    if name == "RendezvousClosedError":  # torch's has no text of its own
        return JobFailed(
            "the job's rendezvous is closed: the run ended on another node before this one "
            "could join or restart its workers (that node's output and run record say why); "
            f"start the job again on every node (torch's messages: {log})"
        )
    if name == "RendezvousConnectionError":
        where = f" at {endpoint}" if endpoint else ""
        if spare:
            return JobFailed(
                f"lost the rendezvous{where} while this node waited as a spare (no worker "
                "ran here): the node that hosts it (node 0) ended or stopped without telling "
                f"it; that node's output and run record say how the job ended (torch's "
                f"messages: {log})"
            )
        return JobFailed(
            f"lost the rendezvous{where}: the node that hosts it (node 0) stopped or cannot "
            f"be reached ({exc}); see that node's output, then start the job again on every "
            f"node (torch's messages: {log})"
        )
    return JobFailed(f"the launch failed: {name}: {exc} (torch's messages: {log})")
