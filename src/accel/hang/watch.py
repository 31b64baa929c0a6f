"""The launcher's hang watch: a thread that checks, dumps stacks and reports once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel.hang.detect import HangVerdict, check_hang, last_activity
from accel.hang.dump import append_to_rank_logs, dump_stacks


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
        verdict = check_hang(
            activity, since=self._since, now=self._clock(), timeout=self.timeout, ranks=pids
        )
        if verdict is None:
            return None
        stacks = dump_stacks(self.run_dir, pids, trusted=True)  # the launcher's own
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
