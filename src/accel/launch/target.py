"""Whether ``accel launch -m NAME`` names a module the workers can find, before any starts.

A worker runs ``-m NAME`` as ``python -m`` does: the current folder first on
``sys.path``, then ``PYTHONPATH``, then the interpreter's own folders (see
:mod:`accel.launch._bootstrap`). The launcher looks up the top-level name only, on that
same path, with :func:`importlib.util.find_spec`: nothing of the user's package is
imported or run here (a package's ``__init__`` would be executed by a lookup of
``pkg.train``).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path

from accel.errors import UsageError

__all__ = ["check_module"]


def check_module(name: str, cwd: Path, pythonpath: str) -> None:
    """:class:`UsageError` when the workers would find no top-level module of ``name``.

    ``pythonpath``: the ``PYTHONPATH`` the workers get (relative entries are read from
    ``cwd``, as a worker started there would).
    """
    top, _, rest = name.partition(".")
    path = [str(cwd), *(str(cwd / p) for p in pythonpath.split(os.pathsep) if p)]
    with _searching(path):
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):  # a module without a spec: it exists
            return
    if spec is None:
        raise UsageError(
            f"-m {name}: no module {top!r} in {cwd} or on the workers' sys.path"
            f"{_did_you_mean(top, path)} (a script is launched without -m)"
        )
    if rest and spec.submodule_search_locations is None:
        hint = f"; did you mean -m {top}?" if rest == "py" else ""
        raise UsageError(f"-m {name}: {top!r} is a module, not a package{hint}")


@contextlib.contextmanager
def _searching(path: list[str]) -> Iterator[None]:
    """``sys.path`` as a worker's begins, for one lookup; then as it was."""
    saved = list(sys.path)
    sys.path[:0] = [p for p in path if p not in sys.path]
    importlib.invalidate_caches()  # a file made a moment ago is found
    try:
        yield
    finally:
        sys.path[:] = saved


def _did_you_mean(top: str, path: list[str]) -> str:
    names = {m.name for m in pkgutil.iter_modules([*path, *sys.path])}
    close = difflib.get_close_matches(top, sorted(names), n=1, cutoff=0.75)
    return f"; did you mean -m {close[0]}?" if close else ""
