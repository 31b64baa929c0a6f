"""The launcher's observability: resource telemetry and hang detection for one run.

Driven by the runner's hooks (all on the launcher's main thread, except the two
background threads it owns): :meth:`RunObserver.attempt_started` when workers start,
:meth:`RunObserver.tick` on every monitor tick, :meth:`RunObserver.finish` at the end.
The sampler and the hang watch run in their own threads, never in the workers; run.json
is only written by the runner, on the main thread, from what :meth:`tick` returns.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from accel.hang import METRICS_FILE, HangEvent, HangWatch, write_workers
from accel.launch.blame import HangClue, describe_stuck, stuck_ranks
from accel.launch.divergence import STOP, MetricsTail, NonFinite, first_nonfinite
from accel.launch.plan import LaunchPlan
from accel.runs.failures import BY_HANG, Stop
from accel.runs.status import RunStatus
from accel.telemetry import RESOURCES_FILE, ResourceSampler, read_samples, summarize

METRICS_CHECK_INTERVAL = 0.5  # seconds between looks at metrics.jsonl
Pids = Callable[[], Mapping[int, int]]


def gpu_indices(plan: LaunchPlan) -> Sequence[int] | None:
    """The GPUs the workers may use: none on CPU runs, else CUDA_VISIBLE_DEVICES or all."""
    env = plan.worker_env
    if str(env.get("ACCELERATE_USE_CPU", "")).lower() == "true":
        return ()
    visible = env.get("CUDA_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    try:
        return [int(i) for i in visible.split(",") if i.strip()]
    except ValueError:  # GPU UUIDs: NVML indices unknown, sample them all
        return None


class RunObserver:
    def __init__(
        self,
        plan: LaunchPlan,
        pids: Pids,
        output: Callable[[], Mapping[int, float]],
        notify: Callable[[str], None],
    ) -> None:
        self.plan = plan
        self.notify = notify
        self._pids = pids
        assert plan.settings is not None, "a plan to run is made by plan_launch"
        launch, logs = plan.settings.launch, plan.settings.logs
        self.action = launch.hang_action
        self.sampler = ResourceSampler(
            pids, plan.run_dir / RESOURCES_FILE, logs.resource_interval, gpus=gpu_indices(plan)
        )
        timeout = launch.hang_timeout
        self.watch = (
            HangWatch(plan.run_dir, pids, float(timeout), self._queue, output=output)
            if timeout
            else None
        )
        self._events: collections.deque[HangEvent] = collections.deque()
        self.hangs: list[dict[str, Any]] = []
        self.killed: dict[int, tuple[HangEvent, float]] = {}  # attempt -> hang, kill time
        self._attempt = 0
        self._hung = False
        self.on_nonfinite = logs.on_nonfinite
        self._metrics = MetricsTail(plan.run_dir / METRICS_FILE)
        self._metrics_seen: set[str] = set()
        self._metrics_due = 0.0
        self.nonfinite: list[NonFinite] = []
        self.diverged: NonFinite | None = None  # set when on_nonfinite: stop fired

    def start(self) -> None:
        self.sampler.start()
        if self.watch is not None:
            self.watch.start()

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        self.sampler.stop()

    def _queue(self, event: HangEvent) -> None:  # on the watch thread
        self._events.append(event)

    # -- hooks ------------------------------------------------------------------------

    def attempt_started(self, attempt: int, pids: Mapping[int, int]) -> None:
        self._attempt = attempt
        with contextlib.suppress(OSError):
            write_workers(self.plan.run_dir, attempt, pids)
        if self.watch is not None:
            self.watch.reset()

    def tick(self, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """The updated run record when a hang began or ended or a metric diverged, else None."""
        found = self._check_metrics(time.monotonic())
        if found:
            return self._on_nonfinite(record, found)
        if self._events:
            return self._on_hang(record, self._events.popleft())
        if self._hung and self.watch is not None and not self.watch.hung:
            self._hung = False
            self.notify("accel: the run is active again")
            return {**record, "status": RunStatus.RUNNING}
        return None

    def _on_hang(
        self, record: Mapping[str, Any], event: HangEvent, *, ended: bool = False
    ) -> dict[str, Any]:
        verdict = event.verdict
        self._hung = True
        stopping = self.action == "kill" and not ended
        clue = HangClue(stacks=dict(event.stacks), quiet=dict(verdict.quiet))
        suspect = describe_stuck(clue)
        who = f"; {suspect}" if suspect else ""
        self.notify(f"accel: run {self.plan.run_id} looks hung: {verdict.message}{who}")
        for rank, text in event.stacks.items():
            self.notify(f"[rank{rank}] ===== stack of rank {rank} =====")
            for line in text.splitlines():
                self.notify(f"[rank{rank}] {line}")
        entry = {
            "at": _iso(event.at),
            "attempt": self._attempt,
            "idle": round(verdict.idle, 3),
            "timeout": verdict.timeout,
            "quiet": {str(r): q for r, q in verdict.quiet.items()},
            "action": self.action,
            "message": verdict.message,
            "stuck": sorted(stuck_ranks(clue)),  # whom a kill blames, named or not
        }
        self.hangs.append(entry)
        if stopping:
            self.notify("accel: stopping the workers (--hang-action kill)")
            self.killed[self._attempt] = (event, time.time())
            self._kill()
        elif not ended:
            self.notify("accel: the run goes on (--hang-action warn); stacks are in the rank logs")
        return {**record, "status": RunStatus.HUNG, "hangs": list(self.hangs)}

    def _kill(self) -> None:
        for pid in self._pids().values():
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def hang_stop(self, attempt: int) -> tuple[Stop, HangClue] | None:
        """When the hang watch stopped ``attempt``, and what it saw of each rank."""
        found = self.killed.get(attempt)
        if found is None:
            return None
        event, at = found
        clue = HangClue(stacks=dict(event.stacks), quiet=dict(event.verdict.quiet))
        return Stop(at, BY_HANG, detail=event.verdict.message), clue

    # -- divergence ---------------------------------------------------------------------

    def _check_metrics(self, now: float, *, force: bool = False) -> list[NonFinite]:
        if not force and now < self._metrics_due:
            return []
        self._metrics_due = now + METRICS_CHECK_INTERVAL
        return first_nonfinite(self._metrics.points(), self._metrics_seen)

    def _on_nonfinite(
        self, record: Mapping[str, Any], found: Sequence[NonFinite], *, ended: bool = False
    ) -> dict[str, Any]:
        stop = self.on_nonfinite == STOP and not ended and self.diverged is None
        for event in found:
            self.nonfinite.append(event)
            if stop and self.diverged is None:
                self.diverged = event
                self.notify(f"accel: {event.message}: stopping the run (logs.on_nonfinite: stop)")
            else:
                self.notify(
                    f"accel: warning: {event.message} (set logs.on_nonfinite: stop to stop "
                    "the run when this happens)"
                )
        return {**record, "nonfinite": [e.to_json() for e in self.nonfinite]}

    def finish(
        self, record: Mapping[str, Any], status: RunStatus
    ) -> tuple[dict[str, Any], RunStatus]:
        """The final record (resources, hangs) and status (``hung`` after a hang kill)."""
        while self._events:  # found after the last tick: the workers had just ended
            record = self._on_hang(record, self._events.popleft(), ended=True)
        found = self._check_metrics(time.monotonic(), force=True)
        if found:  # logged in the last moments of the run
            record = self._on_nonfinite(record, found, ended=True)
        summary = summarize(read_samples(self.plan.run_dir / RESOURCES_FILE))
        out = {**record, "resources": summary.to_json()}
        if self.hangs:
            out["hangs"] = list(self.hangs)
        if status == RunStatus.FAILED and self._attempt in self.killed:
            status = RunStatus.HUNG
        return out, status


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stamp))
