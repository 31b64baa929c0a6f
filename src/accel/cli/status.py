"""``accel status``: the workspace at a glance (a tree on a terminal, ``--json`` for machines)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from accel.cli import _app, _output

if TYPE_CHECKING:
    from accel.frameworks import FrameworkCache
    from accel.status import StatusItem, WorkspaceStatus


def status(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for machines."),
) -> int:
    """Where the workspace is, whether its config is valid, what it holds and how big."""
    from accel.status import collect

    ws = _app.workspace(ctx)
    _app.heal_runs(ws)
    st = collect(ws)
    if as_json:
        _output.print_json(status_json(st))
        if st.config_error:
            _output.warn(_config_warning(st))
    elif st.workspace_error is not None:
        from accel.errors import WorkspaceError

        raise WorkspaceError(st.workspace_error)
    elif _output.is_terminal():
        _print_tree(st)
    else:
        _print_plain(st)
    return 0 if st.workspace_error is None else 2


def _config_warning(st: WorkspaceStatus) -> str:
    """The config's error as validation words it, and the command that repairs it."""
    fix = f" (fix: `{st.config_fix}`)" if st.config_fix else ""
    return f"{st.config_error}{fix}"


def status_json(st: WorkspaceStatus) -> dict[str, Any]:
    return {
        "workspace": str(st.path),
        "exists": st.exists,
        "layout_version": st.layout_version,
        "config_file": str(st.config_file),
        "config_valid": None if st.workspace_error else st.config_error is None,
        "config_error": st.config_error,
        "config_fix": st.config_fix,
        "sizes": {p.name: p.size for p in st.parts},
        "total_size": st.total_size,
        "live_runs": list(st.live_runs),
        "largest": [_item_json(i) for i in st.largest],
        "oldest": [_item_json(i) for i in st.oldest],
        "frameworks": [f.to_json() for f in st.frameworks],
        "workspace_error": st.workspace_error,
        "left_alone": [{**_item_json(i), "detail": i.detail} for i in st.left_alone],
    }


def _item_json(item: StatusItem) -> dict[str, Any]:
    return {
        "category": item.category,
        "kind": item.kind,
        "name": item.name,
        "path": str(item.path),
        "size": item.size,
        "last_used": item.last_used,
    }


def _item_text(item: StatusItem, now: float) -> str:
    from accel.units import ago, format_size

    when = ago(now, item.last_used)
    return f"{item.category}: {item.name or item.path.name}  {format_size(item.size)}  {when}"


def _left_alone_text(item: StatusItem) -> str:
    from accel.units import format_size

    why = item.detail or "not made by accel"
    return f"{item.category}: {item.name or item.path.name}  {format_size(item.size)}  ({why})"


def _framework_text(fc: FrameworkCache) -> str:
    from accel.units import format_size

    state = "" if fc.enabled else "  (not enabled: cache.framework_caches)"
    return f"{fc.name}: {format_size(fc.size)}  {fc.variable}{state}"


def _print_tree(st: WorkspaceStatus) -> None:
    from rich.tree import Tree

    from accel.units import format_size

    text = _output.text  # labels are rich markup: what comes from disk goes through text
    root = Tree(f"[bold]{text(st.path)}[/]" + ("" if st.exists else "  (not created yet)"))
    root.add("config: " + ("[green]valid[/]" if st.config_error is None else "[red]INVALID[/]"))
    sizes = root.add(f"size: {format_size(st.total_size)}")
    for part in st.parts:
        sizes.add(f"{text(part.name)}: {format_size(part.size)}")
    if st.frameworks:
        caches = root.add("framework caches")
        for fc in st.frameworks:
            caches.add(text(_framework_text(fc)), highlight=False)
    live = root.add(f"live runs: {len(st.live_runs)}")
    for run_id in st.live_runs:
        live.add(text(run_id))
    for title, items in (("largest", st.largest), ("oldest", st.oldest)):
        if items:
            branch = root.add(title)
            for item in items:
                branch.add(text(_item_text(item, st.now)), highlight=False)
    if st.left_alone:
        branch = root.add(f"left alone (unknown, never cleaned): {len(st.left_alone)}")
        for item in st.left_alone:
            branch.add(text(_left_alone_text(item)), highlight=False)
    _output.console().print(root)
    if st.config_error:
        _output.warn(_config_warning(st))


def _print_plain(st: WorkspaceStatus) -> None:
    from accel.units import format_size

    _output.out(f"workspace  {st.path}" + ("" if st.exists else "  (not created yet)"))
    _output.out("config     " + ("valid" if st.config_error is None else "INVALID"))
    if st.config_error:
        _output.warn(_config_warning(st))
    _output.table(
        None,
        ["part", "size"],
        [[p.name, format_size(p.size)] for p in st.parts] + [["total", format_size(st.total_size)]],
    )
    for fc in st.frameworks:
        _output.out(f"framework  {_framework_text(fc)}")
    _output.out("live runs  " + (", ".join(st.live_runs) or "none"))
    for title, items in (("largest", st.largest), ("oldest", st.oldest)):
        for item in items:
            _output.out(f"{title:<10} {_item_text(item, st.now)}")
    for item in st.left_alone:
        _output.out(f"{'unknown':<10} {_left_alone_text(item)}")
