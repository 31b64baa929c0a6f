"""The hang decision (pure) and the activity it is made from.

A run is hung when *no* rank has printed a line, logged a metric or touched its
heartbeat for the timeout: :func:`check_hang` decides from the last activity times;
:func:`last_activity` reads them (file times) at the edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from accel.hang.worker import heartbeat_path
from accel.layout import METRICS_FILE as METRICS_FILE  # re-exported
from accel.layout import rank_log


def heartbeat_file(run_dir: Path, rank: int | str) -> Path:
    return Path(heartbeat_path(str(run_dir), rank))


@dataclass(frozen=True)
class HangVerdict:
    """The run has been quiet for ``idle`` seconds (>= the timeout)."""

    idle: float
    timeout: float
    last_activity: float
    quiet: Mapping[int, float] = field(default_factory=dict)  # rank -> seconds quiet

    @property
    def message(self) -> str:
        return (
            f"no rank printed, logged a metric or sent a heartbeat for {self.idle:.0f}s "
            f"(hang timeout {self.timeout:g}s)"
        )


def check_hang(
    activity: Mapping[int, float],
    *,
    since: float,
    now: float,
    timeout: float,
    ranks: Iterable[int] = (),
) -> HangVerdict | None:
    """A verdict when the latest activity of any rank (or ``since``) is ``timeout`` old.

    ``activity`` maps rank -> time of its last sign of life; ``since`` is when watching
    began (the attempt's start, or the last alert) so that old activity never counts.
    ``quiet`` has every rank of ``ranks`` and ``activity``: one that never printed,
    logged or beat (the usual case when only rank 0 prints) is quiet since ``since``.
    """
    latest = max([since, *activity.values()])
    idle = now - latest
    if timeout <= 0 or idle < timeout:
        return None
    every = sorted(set(ranks) | set(activity))
    quiet = {rank: round(now - max(since, activity.get(rank, since)), 3) for rank in every}
    return HangVerdict(idle=idle, timeout=timeout, last_activity=latest, quiet=quiet)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def last_activity(
    run_dir: Path, ranks: list[int], output: Mapping[int, float] | None = None
) -> dict[int, float]:
    """Per rank, the newest of: its output (given, else its log's mtime), its heartbeat,
    the run's metrics file (any rank's metric is a sign that the job moves)."""
    metrics = _mtime(run_dir / METRICS_FILE)
    out: dict[int, float] = {}
    for rank in ranks:
        said = output.get(rank) if output is not None else _mtime(run_dir / rank_log(rank))
        times = [t for t in (said, _mtime(heartbeat_file(run_dir, rank)), metrics) if t]
        if times:
            out[rank] = max(times)
    return out
