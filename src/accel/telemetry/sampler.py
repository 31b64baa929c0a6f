"""The launcher's resource sampler: a daemon thread appending to ``resources.jsonl``.

It runs in the launcher, not in the workers, so it never touches the training loop's
interpreter; a sample is a few small ``/proc`` reads (and NVML calls on GPU machines).
Nothing it meets — a worker that just exited, an unreadable ``/proc``, a full disk —
stops the run: the sample or the line is skipped.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from accel._fs import open_private_append
from accel.telemetry import _gpu, _proc
from accel.telemetry.samples import RankStats, Sample, to_line

PidSource = Callable[[], Mapping[int, int]]  # rank -> pid of the live workers
MIN_INTERVAL = 0.05
FIRST_SAMPLE = 1.0  # seconds between tries until the first sample


class ResourceSampler:
    """Samples the ranks returned by ``pids`` every ``interval`` seconds into ``path``.

    ``gpus``: NVML device indices to sample (None = every GPU; ``()`` = none).
    """

    def __init__(
        self,
        pids: PidSource,
        path: Path,
        interval: float,
        *,
        gpus: Sequence[int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.interval = max(MIN_INTERVAL, float(interval))
        self._pids = pids
        self._gpu_indices = gpus
        self._clock = clock
        self._read = _proc.reader()
        self._previous: dict[int, _proc.ProcReading] = {}
        self._nvml: _gpu.Nvml | None = None
        self._nvml_tried = False
        self._nvml_lock = threading.Lock()
        self._file: IO[str] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.count = 0

    def start(self) -> ResourceSampler:
        self._thread = threading.Thread(target=self._loop, name="accel-resources", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take a last sample, then stop the thread and release NVML (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self.interval))
            self._thread = None
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sample(self) -> Sample:
        """One sample of every live rank and GPU (also what the thread appends)."""
        self._open_nvml()
        gpu_memory = self._nvml.process_memory() if self._nvml is not None else {}
        ranks = {}
        for rank, pid in sorted(self._safe_pids().items()):
            stats = self._rank(pid, gpu_memory)
            if stats is not None:
                ranks[rank] = stats
        gpus = tuple(self._nvml.read()) if self._nvml is not None else ()
        return Sample(time=self._clock(), ranks=ranks, gpus=gpus)

    def _open_nvml(self) -> None:
        # Here, not in start(): initialising NVML takes a while, and start() runs on the
        # launcher's main thread before the workers start.
        with self._nvml_lock:
            if not self._nvml_tried and (self._gpu_indices is None or self._gpu_indices):
                self._nvml = _gpu.open_nvml(self._gpu_indices)
            self._nvml_tried = True

    def _rank(self, pid: int, gpu_memory: Mapping[int, int]) -> RankStats | None:
        reading = self._read(pid)
        if reading is None:
            self._previous.pop(pid, None)
            return None
        percent = _proc.cpu_percent(self._previous.get(pid), reading)
        self._previous[pid] = reading
        return RankStats(
            pid=pid,
            cpu_percent=percent,
            rss_bytes=reading.rss_bytes,
            threads=reading.threads,
            gpu_memory_bytes=gpu_memory.get(pid),
        )

    def _safe_pids(self) -> Mapping[int, int]:
        try:
            return dict(self._pids())
        except Exception:  # noqa: BLE001 - the launcher's view may be mid-restart
            return {}

    def _loop(self) -> None:
        # Every second until the first sample lands (workers take a moment to start),
        # so that even a short run leaves some figures behind; then every interval.
        while not self._stop.wait(
            self.interval if self.count else min(self.interval, FIRST_SAMPLE)
        ):
            self._append(self.sample())
        self._append(self.sample())

    def _append(self, sample: Sample) -> None:
        if not sample.ranks and not sample.gpus:
            return
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = open_private_append(self.path)
                self._file = open(fd, "a", encoding="utf-8")  # noqa: SIM115
            # One write per line in append mode: readers see whole lines (or a torn
            # last one after a crash, which they skip).
            self._file.write(to_line(sample))
            self._file.flush()
            self.count += 1
        except OSError:
            return
