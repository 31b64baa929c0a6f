"""Hang detection and on-demand stack dumps of the workers of a run.

**Stack dumps.** Every worker started by ``accel launch`` calls
:func:`install_stack_dump_handler` from its bootstrap: :mod:`faulthandler` then writes
the Python stack of every thread to ``<run>/stacks/rank-<N>.txt`` when the worker
receives ``SIGUSR1``. The handler runs in C inside the signal handler, so it answers
even when the main thread is stuck in native code. :func:`dump_stacks` signals the
workers (only those that catch the signal: an uncaught SIGUSR1 would kill them) and
returns what each one wrote.

**Hangs.** A run is hung when *no* rank has printed a line, logged a metric or touched
its heartbeat for ``launch.hang_timeout``: :func:`check_hang` decides that from the
last activity times (pure); :class:`HangWatch` is the launcher thread that gathers
them, dumps the stacks once per quiet period and hands the event to the launcher.

The worker side (:func:`install_stack_dump_handler`, :func:`heartbeat`) imports only
the standard library at module level, so the bootstrap can load this file by path
without importing accel (worker start-up stays as cheap as a bare interpreter).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

STACK_SIGNAL = signal.SIGUSR1
RUN_DIR_ENV = "ACCEL_RUN_DIR"
STACKS_DIR = "stacks"
HEARTBEATS_DIR = "heartbeats"
METRICS_FILE = "metrics.jsonl"
WORKERS_FILE = "workers.json"  # {"attempt": N, "pids": {"<rank>": pid}} of this node

_handler_file: IO[str] | None = None  # faulthandler writes to its fd: keep it open


# -- worker side ------------------------------------------------------------------------


def _rank(env: Mapping[str, str]) -> str:
    rank = env.get("RANK", "0")
    return rank if rank.isdigit() else "0"


def stacks_file(run_dir: Path, rank: int | str) -> Path:
    return Path(run_dir) / STACKS_DIR / f"rank-{rank}.txt"


def heartbeat_file(run_dir: Path, rank: int | str) -> Path:
    return Path(run_dir) / HEARTBEATS_DIR / f"rank-{rank}"


def install_stack_dump_handler(env: Mapping[str, str] | None = None) -> Path | None:
    """Dump every thread's stack on ``SIGUSR1``; returns the file it goes to.

    Into ``$ACCEL_RUN_DIR/stacks/rank-$RANK.txt`` under ``accel launch``; elsewhere to
    stderr (None is returned). Never raises: a worker must start even when it fails.
    """
    global _handler_file
    env = os.environ if env is None else env
    target: IO[str] = sys.stderr
    path = stacks_file(Path(env[RUN_DIR_ENV]), _rank(env)) if env.get(RUN_DIR_ENV) else None
    try:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            target = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
            _handler_file = target
        faulthandler.register(STACK_SIGNAL, file=target, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError, AttributeError):
        return None
    return path


def heartbeat(env: Mapping[str, str] | None = None) -> None:
    """Tell a hang watch this rank is alive (cheap: one ``utime``). No-op outside a run."""
    env = os.environ if env is None else env
    if not env.get(RUN_DIR_ENV):
        return
    path = heartbeat_file(Path(env[RUN_DIR_ENV]), _rank(env))
    try:
        os.utime(path)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    except OSError:
        pass


# -- the decision (pure) ----------------------------------------------------------------


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
    activity: Mapping[int, float], *, since: float, now: float, timeout: float
) -> HangVerdict | None:
    """A verdict when the latest activity of any rank (or ``since``) is ``timeout`` old.

    ``activity`` maps rank -> time of its last sign of life; ``since`` is when watching
    began (the attempt's start, or the last alert) so that old activity never counts.
    """
    latest = max([since, *activity.values()])
    idle = now - latest
    if timeout <= 0 or idle < timeout:
        return None
    quiet = {rank: round(now - max(since, t), 3) for rank, t in sorted(activity.items())}
    return HangVerdict(idle=idle, timeout=timeout, last_activity=latest, quiet=quiet)


# -- launcher side: activity, signals, stacks -------------------------------------------


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
        said = output.get(rank) if output is not None else _mtime(run_dir / f"rank-{rank}.log")
        times = [t for t in (said, _mtime(heartbeat_file(run_dir, rank)), metrics) if t]
        if times:
            out[rank] = max(times)
    return out


def catches(pid: int, sig: int = STACK_SIGNAL) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (Linux: SigCgt in /proc/<pid>/status)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return sys.platform != "linux" and _alive(pid)
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def dump_stacks(run_dir: Path, pids: Mapping[int, int], wait: float = 3.0) -> dict[int, str]:
    """Signal each rank's worker and return ``rank -> its stack dump``.

    A rank whose worker is gone, or does not catch the signal (not started by
    ``accel launch``, or still starting), maps to a one-line explanation instead.
    """
    pending: dict[int, tuple[Path, int]] = {}
    out: dict[int, str] = {}
    for rank, pid in sorted(pids.items()):
        path = stacks_file(run_dir, rank)
        offset = _size(path)
        if not catches(pid):
            out[rank] = f"(pid {pid} is gone or does not dump stacks on SIGUSR1)"
            continue
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError as exc:
            out[rank] = f"(pid {pid}: {exc.strerror})"
            continue
        pending[rank] = (path, offset)
    out.update(_collect(pending, wait))
    return dict(sorted(out.items()))


def _collect(pending: Mapping[int, tuple[Path, int]], wait: float) -> dict[int, str]:
    """Wait until every file grew and then stopped growing (faulthandler gives no end mark)."""
    deadline = time.monotonic() + wait
    sizes = {rank: -1 for rank in pending}
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = {rank: _size(path) for rank, (path, _) in pending.items()}
        settled = all(now[r] > pending[r][1] and now[r] == sizes[r] for r in pending)
        sizes = now
        if settled:
            break
    return {rank: _read_from(path, offset) for rank, (path, offset) in pending.items()}


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        text = ""
    return text.rstrip("\n") or "(no stack was written in time)"


def write_workers(run_dir: Path, attempt: int, pids: Mapping[int, int]) -> None:
    """Record this node's live workers for ``accel stack`` (rewritten at every attempt)."""
    from accel.fsutil import atomic_write_json

    data = {"attempt": attempt, "pids": {str(r): p for r, p in sorted(pids.items())}}
    atomic_write_json(Path(run_dir) / WORKERS_FILE, data, durable=False)


def read_workers(run_dir: Path) -> dict[int, int]:
    """``rank -> pid`` of the run's workers on this node ({} when unknown)."""
    import json

    try:
        data = json.loads((Path(run_dir) / WORKERS_FILE).read_text(encoding="utf-8"))
        return {int(r): int(p) for r, p in dict(data["pids"]).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def append_to_rank_logs(run_dir: Path, stacks: Mapping[int, str], title: str) -> None:
    """Append each dump to ``rank-N.log`` under a marked header (one write per rank)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    for rank, text in stacks.items():
        block = f"===== accel: {title} at {stamp} =====\n{text}\n===== end of stacks =====\n"
        with contextlib.suppress(OSError), open(run_dir / f"rank-{rank}.log", "a") as fh:
            fh.write(block)


# -- the launcher's watch thread --------------------------------------------------------


@dataclass(frozen=True)
class HangEvent:
    verdict: HangVerdict
    stacks: Mapping[int, str]
    at: float


class HangWatch:
    """Checks a run for hangs every second or so; calls ``on_hang`` once per quiet period.

    On a hang it dumps every rank's stack into its ``rank-N.log`` before ``on_hang``
    (which shows them, marks the run and, with ``--hang-action kill``, stops it).

    ``output`` gives rank -> time of its last output line (the launcher's log pump
    knows); without it the rank logs' mtimes stand in. Call :meth:`reset` when the
    workers (re)start.
    """

    def __init__(
        self,
        run_dir: Path,
        pids: Callable[[], Mapping[int, int]],
        timeout: float,
        on_hang: Callable[[HangEvent], Any],
        *,
        output: Callable[[], Mapping[int, float]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.timeout = float(timeout)
        self.events: list[HangEvent] = []
        self._pids = pids
        self._on_hang = on_hang
        self._output = output
        self._clock = clock
        self._since = clock()
        self._alerted_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="accel-hang-watch", daemon=True)

    @property
    def hung(self) -> bool:
        return self._alerted_at is not None

    def start(self) -> HangWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def reset(self) -> None:
        self._since = self._clock()
        self._alerted_at = None

    def check(self) -> HangEvent | None:
        """One check; the event when this call declared a hang."""
        pids = dict(self._pids())
        if not pids:
            return None
        output = dict(self._output()) if self._output is not None else None
        activity = last_activity(self.run_dir, sorted(pids), output)
        if self._alerted_at is not None:
            if max(activity.values(), default=0.0) <= self._alerted_at:
                return None  # still quiet since the last alert: one alert per quiet period
            self._alerted_at = None
        verdict = check_hang(activity, since=self._since, now=self._clock(), timeout=self.timeout)
        if verdict is None:
            return None
        stacks = dump_stacks(self.run_dir, pids)
        append_to_rank_logs(self.run_dir, stacks, f"hang detected: {verdict.message}; stacks")
        event = HangEvent(verdict=verdict, stacks=stacks, at=self._clock())
        self._alerted_at = event.at
        self.events.append(event)
        return event

    def _loop(self) -> None:
        poll = min(1.0, max(0.05, self.timeout / 10))
        while not self._stop.wait(poll):
            try:
                event = self.check()
                if event is not None:
                    self._on_hang(event)
            except Exception:  # noqa: BLE001 - a broken check must never stop the run
                continue
