"""Resource telemetry of a run: what the workers use, sampled by the launcher.

Every ``logs.resource_interval`` the launcher's :class:`ResourceSampler` records per
rank CPU %, RSS and threads (from ``/proc`` on Linux, psutil elsewhere when installed)
and per GPU utilisation, memory, temperature and power (NVML through ``nvidia-ml-py``
when installed and a GPU answers) as one JSON line of ``resources.jsonl`` in the run
folder. :func:`summarize` turns the samples into the peaks and means run.json keeps.
"""

from __future__ import annotations

from accel.telemetry._gpu import GpuStats
from accel.telemetry.sampler import PidSource, ResourceSampler
from accel.telemetry.samples import RESOURCES_FILE, RankStats, Sample, iter_samples, read_samples
from accel.telemetry.summary import ResourceSummary, Stat, summarize

__all__ = [
    "RESOURCES_FILE",
    "GpuStats",
    "PidSource",
    "RankStats",
    "ResourceSampler",
    "ResourceSummary",
    "Sample",
    "Stat",
    "iter_samples",
    "read_samples",
    "summarize",
]
