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

from accel.hang import HangEvent, HangWatch, write_workers
from accel.launch.plan import LaunchPlan
from accel.launch.record import RankFailure
from accel.telemetry import RESOURCES_FILE, ResourceSampler, read_samples, summarize

HUNG = "hung"
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
        launch = plan.config.get("launch", {})
        logs = plan.config.get("logs", {})
        self.action = str(launch.get("hang_action") or "warn")
        self.sampler = ResourceSampler(
            pids,
            plan.run_dir / RESOURCES_FILE,
            float(logs.get("resource_interval") or 10.0),
            gpus=gpu_indices(plan),
        )
        timeout = launch.get("hang_timeout")
        self.watch = (
            HangWatch(plan.run_dir, pids, float(timeout), self._queue, output=output)
            if timeout
            else None
        )
        self._events: collections.deque[HangEvent] = collections.deque()
        self.hangs: list[dict[str, Any]] = []
        self.killed: dict[int, HangEvent] = {}  # attempt -> the hang that stopped it
        self._attempt = 0
        self._hung = False

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
        """The updated run record when a hang began or ended, else None."""
        if self._events:
            return self._on_hang(record, self._events.popleft())
        if self._hung and self.watch is not None and not self.watch.hung:
            self._hung = False
            self.notify("accel: the run is active again")
            return {**record, "status": "running"}
        return None

    def _on_hang(
        self, record: Mapping[str, Any], event: HangEvent, *, ended: bool = False
    ) -> dict[str, Any]:
        verdict = event.verdict
        self._hung = True
        stopping = self.action == "kill" and not ended
        self.notify(f"accel: run {self.plan.run_id} looks hung: {verdict.message}")
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
        }
        self.hangs.append(entry)
        if stopping:
            self.notify("accel: stopping the workers (--hang-action kill)")
            self.killed[self._attempt] = event
            self._kill()
        elif not ended:
            self.notify("accel: the run goes on (--hang-action warn); stacks are in the rank logs")
        return {**record, "status": HUNG, "hangs": list(self.hangs)}

    def _kill(self) -> None:
        for pid in self._pids().values():
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def hang_failures(self, attempt: int, failures: Sequence[RankFailure]) -> list[RankFailure]:
        """The failures of an attempt the hang watch stopped, labelled as a hang."""
        event = self.killed.get(attempt)
        if event is None:
            return list(failures)
        quiet = event.verdict.quiet
        root = max(sorted(quiet), key=lambda r: quiet[r]) if quiet else None
        return [
            RankFailure(
                rank=f.rank,
                local_rank=f.local_rank,
                pid=f.pid,
                exitcode=f.exitcode,
                attempt=f.attempt,
                timestamp=event.at,
                type="Hang",
                message=event.verdict.message,
                traceback=event.stacks.get(f.rank),
                collateral=root is not None and f.rank != root,
            )
            for f in failures
        ]

    def finish(self, record: Mapping[str, Any], status: str) -> tuple[dict[str, Any], str]:
        """The final record (resources, hangs) and status (``hung`` after a hang kill)."""
        while self._events:  # found after the last tick: the workers had just ended
            record = self._on_hang(record, self._events.popleft(), ended=True)
        summary = summarize(read_samples(self.plan.run_dir / RESOURCES_FILE))
        out = {**record, "resources": summary.to_json()}
        if self.hangs:
            out["hangs"] = list(self.hangs)
        if status == "failed" and self._attempt in self.killed:
            status = HUNG
        return out, status


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(stamp))
