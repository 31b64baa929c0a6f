"""``accel checkpoints list|show|verify|export|rm``: the committed checkpoints of the workspace.

Each command parses, calls one function of :mod:`accel.admin`, renders and returns an
exit code. Only ``export`` imports torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from accel.cli import _app, _help, _output, _removal
from accel.units import ago

if TYPE_CHECKING:
    from accel.admin.catalog import CheckpointListing
    from accel.admin.detail import CheckpointDetail
    from accel.admin.verify import VerifyReport

app = typer.Typer(
    help="List, show, verify, export and remove the workspace's checkpoints.",
    no_args_is_help=True,
)

_SERIES = typer.Option(
    None, "--series", "-s", metavar="NAME", help="The series (default: the one that has STEP)."
)
_JSON = typer.Option(False, "--json", help="One JSON object, for machines.")


def _step(text: str | None) -> int | None:
    """A STEP that may be omitted or ``latest`` (None for both)."""
    from accel.admin.catalog import parse_step_or_latest

    return None if text is None else parse_step_or_latest(text)


def _export_target(
    step: str | None, path: Path | None, output: Path | None
) -> tuple[int | None, Path]:
    """export's step (None: the latest) and the file to write: ``export 12
    model.safetensors`` as ``accelerate merge-weights`` and ``cp`` take a destination,
    ``-o PATH``, or the file alone (``export model.safetensors``: the latest step)."""
    from accel.admin.export import SUFFIXES
    from accel.errors import UsageError

    if path is not None and output is not None:
        raise UsageError(f"the file to write is given twice ({path} and -o {output}): give it once")
    target = output or path
    # a lone file's name, not a step; a mistyped step (1.5) is still refused as one
    if target is None and step and (Path(step).suffix.lower() in SUFFIXES or "/" in step):
        return None, Path(step)
    parsed = _step(step)  # a bad step is named before a missing file
    if target is None:
        raise UsageError(
            "name the file to write: accel checkpoints export [STEP] PATH "
            "(e.g. model.safetensors; -o PATH works too)"
        )
    return parsed, target


def _removed_step(text: str) -> int:
    """``rm``'s STEP: a number, never ``latest`` (what it removes is named, not implied)."""
    from accel.admin.catalog import parse_step
    from accel.errors import UsageError

    if text.strip().lower() == "latest":
        raise UsageError(
            "`accel checkpoints rm` takes the step to remove as a number, not `latest`: "
            "`accel checkpoints list` shows the steps"
        )
    return parse_step(text)


@app.command("list")
def list_(
    ctx: typer.Context,
    series: str | None = typer.Option(None, "--series", "-s", metavar="NAME", help="Only NAME."),
    as_json: bool = _JSON,
) -> int:
    """Every committed checkpoint: series, step, size, age, run, tag; and what is not one."""
    from accel.admin.catalog import list_checkpoints
    from accel.admin.verify import require_series

    ws = _app.read_workspace(ctx)
    require_series(ws, series)  # `-s typo`: exit 2 naming the series, not an empty list
    listing = list_checkpoints(ws, time.time(), series)
    if as_json:
        _output.print_json(listing.to_json())
    else:
        _print_listing(listing)
    return 0


def _print_listing(listing: CheckpointListing) -> None:
    from accel.units import format_size

    if not listing.checkpoints:
        _output.out("no committed checkpoints")
    else:
        rows = [
            [
                row.manifest.series + (" (in use)" if row.held else ""),
                str(row.manifest.step),
                format_size(row.manifest.size),
                ago(listing.now, row.manifest.created),
                row.manifest.run_id or "",
                row.manifest.tag or "",
            ]
            for row in listing.checkpoints
        ]
        _output.table(None, ["series", "step", "size", "age", "run", "tag"], rows)
        _output.out(f"{len(rows)} checkpoint(s), {format_size(listing.total_bytes)}")
    if listing.leftovers:
        other = [
            [item.kind, str(item.path), format_size(item.size), item.reason or ""]
            for item in listing.leftovers
        ]
        _output.table("Not checkpoints (never loaded)", ["kind", "path", "size", "why"], other)


@app.command(cls=_help.Command)
def show(
    ctx: typer.Context,
    step: str | None = typer.Argument(
        None,
        metavar="STEP",
        help="The step (1200, step-000000001200, or latest); the latest when omitted.",
    ),
    series: str | None = _SERIES,
    as_json: bool = _JSON,
) -> int:
    """One checkpoint's manifest: files, sizes, checksums, created, run, what it holds."""
    from accel.admin.detail import show_checkpoint

    detail = show_checkpoint(_app.read_workspace(ctx), _step(step), series)
    if as_json:
        _output.print_json(detail.to_json())
    else:
        _print_detail(detail)
    return 0


def _print_detail(detail: CheckpointDetail) -> None:
    from datetime import datetime

    from accel.units import format_size

    m = detail.manifest
    created = datetime.fromtimestamp(m.created).isoformat(sep=" ", timespec="seconds")
    lines = [
        ("checkpoint", f"{m.series} step {m.step}"),
        ("path", str(detail.path)),
        ("created", f"{created} ({ago(time.time(), m.created)})"),
        ("run", m.run_id or "-"),
        ("tag", m.tag or "-"),
        ("world size", str(m.world_size) + ("  (sharded state)" if detail.sharded else "")),
        ("size", f"{format_size(m.size)} in {len(m.files)} file(s)"),
    ]
    if detail.state_keys is not None:
        models = f"  ({detail.models} model(s))" if detail.models is not None else ""
        lines.append(("state keys", ", ".join(detail.state_keys) + models))
    if detail.extra_keys is not None:
        lines.append(("extra keys", ", ".join(detail.extra_keys) or "-"))
    if detail.state_problem is not None:
        lines.append(("state", f"unreadable: {detail.state_problem}"))
    for label, value in lines:
        _output.out(f"{label:<11} {value}")
    rows = [[n, str(d.size), d.checksum] for n, d in sorted(m.files.items())]
    _output.table(None, ["file", "bytes", "checksum"], rows)


@app.command(cls=_help.Command)
def verify(
    ctx: typer.Context,
    step: str | None = typer.Argument(
        None, metavar="STEP", help="The step, or latest; every checkpoint when omitted."
    ),
    series: str | None = _SERIES,
    as_json: bool = _JSON,
) -> int:
    """Check every file against its manifest's size and checksum; exit 1 on a mismatch."""
    from accel.admin import verify as verify_mod

    chosen = _step(step)
    latest = step is not None and chosen is None
    ws = _app.read_workspace(ctx)
    with _output.progress() as bar:
        report = verify_mod.verify_series(ws, chosen, series, bar, latest)
    if as_json:
        _output.print_json(report.to_json())
    else:
        _print_report(report)
    return 0 if report.ok else 1


def _print_report(report: VerifyReport) -> None:
    from accel.units import format_size

    for checked in report.checks:
        where = f"{checked.series}/step {checked.step}"
        if checked.vanished:
            _output.warn(f"{where} was deleted while it was verified")
        for problem in checked.problems:
            _output.error(f"{checked.path / problem.file} {problem.problem} ({where})")
        for name in checked.unlisted:
            _output.warn(f"{checked.path / name} is not in the manifest of {where}: not verified")
    for refused in report.unreadable:
        _output.error(refused.reason)
    total = len(report.checks) + len(report.unreadable)
    if report.ok:
        _output.out(
            f"verified {len(report.checks)} checkpoint(s), {report.files} file(s), "
            f"{format_size(report.size)}: all match"
            if report.checks
            else "no committed checkpoints to verify"
        )
    else:
        bad = len(report.failed) + len(report.unreadable)
        _output.out(f"{bad} of {total} checkpoint(s) failed verification")


@app.command(cls=_help.Command)
def export(
    ctx: typer.Context,
    step: str | None = typer.Argument(
        None, metavar="STEP", help="The step; the latest when omitted (or latest)."
    ),
    path: Path | None = typer.Argument(
        None, metavar="PATH", help="The file to write (or -o PATH).", show_default=False
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", metavar="PATH", help="The file to write."
    ),
    fmt: str | None = typer.Option(
        None,
        "--format",
        "-f",
        metavar="FORMAT",
        help="safetensors or pt (default: from the output file's suffix).",
    ),
    series: str | None = _SERIES,
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        metavar="KEY",
        help="Where the model is in the checkpoint, e.g. models.1 or net.",
    ),
    force: bool = typer.Option(False, "--force", help="Replace the output file if it exists."),
    as_json: bool = _JSON,
) -> int:
    """Write a checkpoint's model weights to one file (safetensors or torch.save)."""
    from accel.admin.export import ExportRequest, export
    from accel.units import format_size

    at, target = _export_target(step, path, output)
    request = ExportRequest(target, fmt, at, series, model, force)
    with _output.progress() as bar:
        result = export(_app.workspace(ctx), request, bar)
    if as_json:
        _output.print_json(result.to_json())
        return 0
    for name in result.skipped:
        _output.warn(f"{name} is not a tensor: not exported")
    model = result.model or "the whole state"
    _output.out(
        f"wrote {result.output} ({result.format}, {result.tensors} tensors, "
        f"{format_size(result.size)}) from {result.series} step {result.step}: {model}",
        markup=False,
    )
    return 0


@app.command(cls=_help.Command)
def rm(
    ctx: typer.Context,
    step: str = typer.Argument(..., metavar="STEP", help="The step to remove."),
    series: str | None = _SERIES,
    force: bool = typer.Option(
        False,
        "--force",
        help="Also the newest checkpoint of its series (never a held one), and files "
        "accel did not make inside it.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Show the plan and stop."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before removing."),
    as_json: bool = _JSON,
) -> int:
    """Remove one checkpoint, as safely as `accel clean` does."""
    from accel.admin.remove import plan_checkpoint_removal

    ws = _app.workspace(ctx)
    plan = plan_checkpoint_removal(ws, _removed_step(step), series, force=force)
    return _removal.carry_out(ws, plan, yes=yes, dry_run=dry_run, as_json=as_json)
