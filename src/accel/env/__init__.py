"""What ``accel env`` reports: versions, devices, backends, variables, config, workspace.

:func:`collect` gathers everything into a frozen :class:`EnvReport` of raw values; every
part that can fail (torch missing, config invalid, HOME unset, an unreadable folder)
becomes ``None``/an error string plus a :class:`Problem`, never an exception. Secrets
are redacted here (by :mod:`accel._redact`), so no form of the report (text, markdown,
JSON) can show one.

- :mod:`accel.env.probe`: the machine (Python, platform, packages, torch, devices, the
  training variables). torch is imported inside :func:`~accel.env.probe.torch_info`
  only. Devices are listed by the cheap probe of :mod:`accel.devices` (NVML or the
  driver's files: no CUDA initialised), or by torch itself when asked (``devices=True``).
- :mod:`accel.env.state`: the configuration and the workspace as accel sees them.
- :mod:`accel.env.health`: the rules of ``accel env --check``, one :class:`Problem` each.
"""

from __future__ import annotations

from accel.env.collect import collect
from accel.env.health import problems
from accel.env.probe import relevant_environment
from accel.env.report import ConfigInfo, EnvReport, Problem, TorchInfo, WorkspaceInfo

__all__ = [
    "ConfigInfo",
    "EnvReport",
    "Problem",
    "TorchInfo",
    "WorkspaceInfo",
    "collect",
    "problems",
    "relevant_environment",
]
