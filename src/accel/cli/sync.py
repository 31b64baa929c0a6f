"""``accel sync push|pull URL``: the workspace to and from remote storage (fsspec)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _help, _output

if TYPE_CHECKING:
    from accel.sync import SyncResult
    from accel.workspace import Workspace

app = typer.Typer(
    help="Copy checkpoints, finished runs and the config to or from remote storage.",
    no_args_is_help=True,
)

URL_HELP = "file:///absolute/path, or s3://bucket/prefix, gs://... (any fsspec protocol)."
_INCLUDE_CACHE = typer.Option(False, "--include-cache", help="Also sync the cache.")
_DRY_RUN = typer.Option(False, "--dry-run", help="Show what would move; move nothing.")
_JSON = typer.Option(False, "--json", help="One JSON object, for machines.")
_OPTIONS = typer.Option(
    [],
    "--storage-option",
    "-o",
    metavar="KEY=VALUE",
    help="An option for the fsspec backend, e.g. endpoint_url=http://127.0.0.1:9000 (repeatable).",
)


@app.command(cls=_help.Command)
def push(
    ctx: typer.Context,
    url: str = typer.Argument(..., metavar="URL", help=URL_HELP),
    include_cache: bool = _INCLUDE_CACHE,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
    storage_option: list[str] = _OPTIONS,
    verify: bool = typer.Option(
        False, "--verify", help="Re-check checkpoint files against their manifest before sending."
    ),
) -> int:
    """Copy committed checkpoints, finished runs and the config to URL (only what changed)."""
    return _sync("push", ctx, url, include_cache, dry_run, as_json, storage_option, verify)


@app.command(cls=_help.Command)
def pull(
    ctx: typer.Context,
    url: str = typer.Argument(..., metavar="URL", help=URL_HELP),
    include_cache: bool = _INCLUDE_CACHE,
    dry_run: bool = _DRY_RUN,
    as_json: bool = _JSON,
    storage_option: list[str] = _OPTIONS,
    apply_config: bool = typer.Option(
        False,
        "--apply-config",
        help="Take the keys a pull may carry (numbers, precision, retention, ...) from the "
        "remote's config (pulled aside), showing the difference and what was left out.",
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="With --apply-config: do not ask before applying."
    ),
) -> int:
    """Copy what this workspace lacks from URL; every file is verified before it is visible.

    Only checkpoints, run records and logs, cache entries and the config are pulled; the
    config goes aside (config/accelerate_config.pulled.yaml) until --apply-config, which
    never takes launch.env, launch.preload*, endpoints or paths from it.
    """
    from accel.errors import UsageError

    if apply_config and not yes and not dry_run and not _terminal():
        raise UsageError(
            "not a terminal: pass --yes to apply the remote's config without asking "
            "(or leave out --apply-config)"
        )
    code = _sync("pull", ctx, url, include_cache, dry_run, as_json, storage_option)
    if not dry_run and not _pulled_config(_app.workspace(ctx), url, apply_config, yes):
        return 1
    return code


def _terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _pulled_config(ws: Workspace, url: str, apply: bool, yes: bool) -> bool:
    """Say there is a config aside, or apply it; False when the user declined."""
    from accel._redact import redact_url
    from accel.sync.pulled import apply_pulled, plan_pulled, pulled_aside

    aside = pulled_aside(ws)
    if aside is None:
        return True
    if not apply:
        _output.info(
            f"the remote's config differs: it is in {aside}; "
            f"`accel sync pull {redact_url(url)} --apply-config` shows the difference and "
            "applies what a pull may carry"
        )
        return True
    change = plan_pulled(ws)
    if change is None:
        return True
    for line in change.diff(str(ws.config_file)):  # on stderr: no markup, --json stays clean
        _output.info(line)
    for key, reason in change.left_out:
        _output.info(f"left out {key}: {reason}; the local value stays")
    if not change.empty and not yes and not _output.confirm("Apply these changes?"):
        _output.info(f"nothing applied; the remote's config stays in {aside}")
        return False
    apply_pulled(ws, change)
    if change.empty:
        _output.info("nothing to apply: the remote's config differs only in keys left out")
    else:
        _output.info(f"applied the remote's config to {ws.config_file}")
    return True


def _sync(
    direction: str,
    ctx: typer.Context,
    url: str,
    include_cache: bool,
    dry_run: bool,
    as_json: bool,
    pairs: list[str],
    verify: bool = False,
) -> int:
    from accel import sync

    ws = _app.workspace(ctx)
    remote = sync.open_remote(url, sync.parse_storage_options(pairs), os.environ)
    reporter = _ProgressBar(direction) if sys.stderr.isatty() and not as_json else None
    options: dict[str, Any] = {"include_cache": include_cache, "dry_run": dry_run}
    if direction == "push":
        result = sync.push(ws, remote, verify=verify, reporter=reporter, **options)
    else:
        result = sync.pull(ws, remote, reporter=reporter, **options)
    _log(ws, result)
    if as_json:
        _output.print_json(result.to_json())
    else:
        _render(result)
    return 0 if result.ok else 1


def _render(result: SyncResult) -> None:
    from accel.units import format_duration, format_size

    plan = result.plan
    if result.dry_run and plan.transfers:
        rows = [(u, len(ts), format_size(sum(t.size for t in ts))) for u, ts in plan.units()]
        _output.table(f"would {plan.direction}", ["unit", "files", "size"], rows)
    for s in plan.skipped:
        (_output.error if s.blocking else _output.info)(f"skipped {s.unit}: {s.reason}")
    for s in plan.refused:
        _output.error(f"{s.unit}: {s.reason}")
    for s in result.failed:
        _output.error(f"{s.unit}: {s.reason}")
    verb = {"push": "pushed", "pull": "pulled"}[plan.direction]
    prep = "to" if plan.direction == "push" else "from"
    if result.dry_run:
        head = f"would {plan.direction} {len(plan.transfers)} files"
        _output.out(f"{head} ({format_size(plan.total_bytes)}) {prep} {result.url}")
        return
    rate = result.bytes / result.seconds if result.seconds > 0 else 0.0
    _output.out(
        f"{verb} {result.files} files ({format_size(result.bytes)}) {prep} {result.url} "
        f"in {format_duration(result.seconds)} ({format_size(rate)}/s); "
        f"{plan.unchanged} unchanged"
    )


def _log(ws: Workspace, result: SyncResult) -> None:
    if result.dry_run or not ws.exists:
        return
    blocked = sum(1 for s in result.plan.skipped if s.blocking)
    bad = len(result.failed) + len(result.plan.refused) + blocked
    state = "ok" if result.ok else f"{bad} units failed, refused or not sent"
    ws.log(
        f"sync {result.plan.direction} {result.url}: {result.files} files, "
        f"{result.bytes} bytes, {result.plan.unchanged} unchanged, {state}",
        "info" if result.ok else "warning",
        command="sync",
    )


class _ProgressBar:
    """A rich bar with bytes and rate on stderr, for terminals."""

    def __init__(self, direction: str) -> None:
        self._label = "pushing" if direction == "push" else "pulling"
        self._progress: Any = None
        self._task: Any = None

    def begin(self, total_bytes: int, total_files: int) -> None:
        if not total_files:
            return
        self._progress = _output.byte_bar(f"{self._label} {total_files} files")
        self._progress.start()
        self._task = self._progress.add_task(self._label, total=total_bytes)

    def advance(self, num_bytes: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=num_bytes)

    def end(self) -> None:
        if self._progress is not None:
            self._progress.stop()
