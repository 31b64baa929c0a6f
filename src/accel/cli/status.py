"""``accel status``: the workspace at a glance."""

from __future__ import annotations

import typer

from accel.cli import _app, _output


def status(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON object, for machines."),
) -> int:
    """Where the workspace is, whether its config is valid, how big each part is."""
    from accel.status import collect
    from accel.units import format_size

    st = collect(_app.workspace(ctx))
    if as_json:
        _output.print_json(
            {
                "workspace": str(st.path),
                "exists": st.exists,
                "layout_version": st.layout_version,
                "config_file": str(st.config_file),
                "config_valid": st.config_error is None,
                "config_error": st.config_error,
                "sizes": {p.name: p.size for p in st.parts},
                "total_size": st.total_size,
            }
        )
        return 0 if st.config_error is None else 2
    _output.out(f"workspace  {st.path}" + ("" if st.exists else "  (not created yet)"))
    _output.out("config     " + ("valid" if st.config_error is None else "INVALID"))
    if st.config_error:
        _output.error(st.config_error)
    _output.table(
        None,
        ["part", "size"],
        [[p.name, format_size(p.size)] for p in st.parts] + [["total", format_size(st.total_size)]],
    )
    return 0 if st.config_error is None else 2
