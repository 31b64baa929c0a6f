"""``accel env``: the environment and workspace, for people, bug reports, machines and CI."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _output
from accel.errors import UsageError

if TYPE_CHECKING:
    from accel.env import EnvReport


def env(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for machines."),
    markdown: bool = typer.Option(False, "--markdown", help="Paste-ready for a bug report."),
    check: bool = typer.Option(
        False, "--check", help="Exit 1 with one line per problem when something is wrong (CI)."
    ),
    devices: bool | None = typer.Option(
        None,
        "--devices/--no-devices",
        help="Ask torch about the GPUs (starts CUDA; the default for people), or list none. "
        "Otherwise they come from a cheap probe (NVML, the driver's files).",
    ),
) -> int:
    """Report versions, devices, backends, variables, config and workspace health."""
    from accel.env import collect

    if as_json and markdown:  # --check goes with either: it sets the exit code
        raise UsageError("give --json (for machines) or --markdown (for a bug report), not both")
    if devices is None and not as_json and not check:
        devices = True
    ws = _app.workspace(ctx)
    _app.heal_runs(ws)
    report = collect(ws, os.environ, devices=devices)
    if as_json:
        _output.print_json(report.to_json())
        if report.config.error and not check:
            _output.warn(f"config: {report.config.error}")
    elif markdown:
        _output.raw(render_markdown(report))
    elif check:
        _print_check(report)
    else:
        _print_human(report)
    return 1 if check and not report.healthy else 0


def _print_check(report: EnvReport) -> None:
    for problem in report.problems:
        _output.out(f"problem: {problem.kind}: {problem.message}")
        if problem.fix:
            _output.out(f"  fix: {problem.fix}")
    if report.healthy:
        _output.out("ok: the environment and the workspace are healthy")


def summary_rows(report: EnvReport) -> list[tuple[str, str]]:
    """(name, value) lines shared by the text and markdown forms."""
    t = report.torch
    torch = "missing" if t.error else f"{t.version} ({_build(report)})"
    backends = ", ".join(n for n, ok in t.backends.items() if ok) or "none"
    ws = report.workspace
    return [
        ("accel", report.accel_version),
        ("python", f"{report.python['version']} ({report.python['executable']})"),
        ("platform", report.platform["platform"]),
        ("cpus", str(report.platform["cpu_count"] or "unknown")),
        ("torch", torch),
        ("distributed backends", backends),
        ("devices", _devices(report)),
        ("workspace", f"{ws.path}" + ("" if ws.exists else " (not created yet)")),
        ("config", "valid" if report.config.valid else "INVALID"),
        ("live runs", ", ".join(ws.live_runs) or "none"),
    ]


def _build(report: EnvReport) -> str:
    t = report.torch
    if t.build == "cuda":
        return f"CUDA {t.cuda}"
    if t.build == "rocm":
        return f"ROCm {t.hip}"
    return "CPU"


def _devices(report: EnvReport) -> str:
    if report.devices is None:
        return "not probed (--devices)"
    if not report.devices:
        return "no GPU"
    from accel.units import format_size

    return "; ".join(
        f"{d.index}: {d.name}" + (f" ({format_size(d.total_memory)})" if d.total_memory else "")
        for d in report.devices
    )


def _print_human(report: EnvReport) -> None:
    from accel.units import format_size

    _output.table("Environment", ["item", "value"], summary_rows(report))
    if report.workspace.sizes:
        _output.table(
            "Workspace",
            ["part", "size"],
            [(k, format_size(v)) for k, v in report.workspace.sizes.items()],
        )
    _output.table("Variables", ["name", "value"], list(report.environment.items()))
    _output.table("Configuration", ["key", "value", "origin"], _config_rows(report))
    _output.table("Packages", ["package", "version"], _package_rows(report))
    for problem in report.problems:
        fix = f" (fix: {problem.fix})" if problem.fix else ""
        _output.warn(f"{problem.kind}: {problem.message}{fix}")


def _config_rows(report: EnvReport) -> list[tuple[str, str, str]]:
    from accel.config.schema import display

    if not report.config.valid:
        return [("(invalid)", report.config.error or "", report.config.file)]
    rows = []
    for section, values in report.config.values.items():
        for name, value in values.items():
            key = f"{section}.{name}"
            rows.append((key, display(key, value), report.config.origins.get(key, "")))
    return rows


def _package_rows(report: EnvReport) -> list[tuple[str, str]]:
    return [(name, version or "not installed") for name, version in report.packages.items()]


def render_markdown(report: EnvReport) -> str:
    """The report as Markdown, to paste into a bug report (secrets already redacted)."""
    lines = ["## accel env", ""]
    lines += [f"- **{name}**: {_md(value)}" for name, value in summary_rows(report)]
    lines += ["", "<details><summary>Variables, configuration, packages</summary>", ""]
    lines += _md_table(["variable", "value"], list(report.environment.items()))
    lines += _md_table(["key", "value", "origin"], _config_rows(report))
    lines += _md_table(["package", "version"], _package_rows(report))
    lines += ["</details>", ""]
    if report.problems:
        lines += ["### Problems", ""]
        lines += [
            f"- `{p.kind}`: {_md(p.message)}" + (f" Fix: `{p.fix}`" if p.fix else "")
            for p in report.problems
        ]
    return "\n".join(lines).rstrip() + "\n"


def _md_table(header: list[str], rows: list[Any]) -> list[str]:
    if not rows:
        return []
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md(str(c)) for c in row) + " |" for row in rows]
    return [*out, ""]


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
