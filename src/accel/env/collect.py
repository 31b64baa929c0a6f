"""Gather the whole report: the probes, then the health rules over what they found."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from accel._version import __version__
from accel.env.health import problems
from accel.env.probe import (
    devices_of,
    package_versions,
    platform_info,
    python_info,
    relevant_environment,
    torch_info,
)
from accel.env.report import EnvReport
from accel.env.state import config_info, workspace_state
from accel.workspace import Workspace


def collect(ws: Workspace, env: Mapping[str, str], *, devices: bool | None = None) -> EnvReport:
    """Everything ``accel env`` shows; never raises for a broken environment.

    ``devices``: None lists the GPUs with the cheap probe, True asks torch (it
    initialises CUDA), False leaves them out (``None`` in the report).
    """
    torch = torch_info()
    config = config_info(ws)
    found = devices_of(torch, env, devices)
    # the debris rule reads the clean scan only of a valid config: then from the same walk
    workspace, scanned = workspace_state(ws, scan=config.valid)
    report = EnvReport(
        accel_version=__version__,
        python=python_info(),
        platform=platform_info(),
        torch=torch,
        devices=found,
        environment=relevant_environment(env),
        packages=package_versions(),
        config=config,
        workspace=workspace,
    )
    return replace(report, problems=tuple(problems(ws, report, env, scan=scanned)))
