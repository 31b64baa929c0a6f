"""``accel cache list|rm``: the cache entries of the workspace (no torch)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer

from accel.cli import _app, _help, _output, _removal
from accel.units import ago

if TYPE_CHECKING:
    from accel.admin.cache import CacheListing

app = typer.Typer(help="List and remove cache entries.", no_args_is_help=True)

_JSON = typer.Option(False, "--json", help="One JSON object, for machines.")


@app.command("list")
def list_(
    ctx: typer.Context,
    prefix: str | None = typer.Option(
        None, "--prefix", "-p", metavar="PREFIX", help="Only keys starting with PREFIX."
    ),
    as_json: bool = _JSON,
) -> int:
    """Every entry: key, kind, size, last use, run; and folders that are no entry."""
    from accel.admin.cache import list_cache

    listing = list_cache(_app.read_workspace(ctx), time.time(), prefix)
    if as_json:
        _output.print_json(listing.to_json())
    else:
        _print_listing(listing)
    return 0


def _print_listing(listing: CacheListing) -> None:
    from accel.units import format_size

    entries = listing.entries
    if not entries:
        _output.out("no cache entries")
    else:
        rows = [
            [
                r.key,
                r.meta.kind,
                format_size(r.meta.size),
                ago(listing.now, r.meta.last_used),
                r.meta.run_id or "",
            ]
            for r in entries
            if r.meta is not None
        ]
        _output.table(None, ["key", "kind", "size", "last used", "run"], rows)
        _output.out(
            f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}, "
            f"{format_size(listing.total_bytes)}"
        )
    if listing.others:
        rows = [[r.state, r.key, r.reason or ""] for r in listing.others]
        _output.table("Not entries (never returned by get)", ["kind", "key", "why"], rows)


@app.command(cls=_help.Command)
def rm(
    ctx: typer.Context,
    key: str | None = typer.Argument(None, metavar="KEY", help="The key of the entry to remove."),
    prefix: str | None = typer.Option(
        None, "--prefix", "-p", metavar="PREFIX", help="Every entry whose key starts with PREFIX."
    ),
    force: bool = typer.Option(
        False, "--force", help="Also files accel did not make inside the entries."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Show the plan and stop."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before removing."),
    as_json: bool = _JSON,
) -> int:
    """Remove one entry by KEY, or every entry under --prefix (a live run's stay)."""
    from accel.admin.remove import plan_cache_removal

    ws = _app.workspace(ctx)
    plan = plan_cache_removal(ws, key, prefix, force=force)
    return _removal.carry_out(ws, plan, yes=yes, dry_run=dry_run, as_json=as_json)
