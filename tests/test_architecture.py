"""The import rules of docs/architecture.md, read from the source (no module is imported).

Every ``import`` counts: at the top of a module, inside a function, under
``TYPE_CHECKING``. A type hint is a dependency too: it is what makes a module need
another to be understood, and the circle it closes is what this test exists to prevent.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "accel"

# The floors, low to high (docs/architecture.md). A module may import its own floor or
# lower. A module belongs to the floor of the longest prefix that names it.
GROUND, BASE, STORES, FACADE, OPERATIONS, EDGE = range(6)
FLOORS: dict[str, int] = {
    "accel.errors": GROUND,
    "accel.units": GROUND,
    "accel._redact": GROUND,
    "accel._fs": GROUND,
    "accel._locks": GROUND,
    "accel._faults": GROUND,
    "accel._version": GROUND,
    "accel._worker_hooks": GROUND,
    "accel.layout": BASE,
    "accel.config": BASE,
    "accel.identity": BASE,
    "accel.devices": BASE,
    "accel.store": STORES,
    "accel.runs": STORES,
    "accel.hang": STORES,
    "accel.telemetry": STORES,
    "accel.frameworks": STORES,
    "accel.training_log": STORES,
    "accel.crashlog": STORES,
    "accel.workspace": FACADE,
    "accel": OPERATIONS,  # the public API: Accelerator, Workspace, AccelError
    "accel.clean": OPERATIONS,
    "accel.sync": OPERATIONS,
    "accel.launch": OPERATIONS,
    "accel.env": OPERATIONS,
    "accel.status": OPERATIONS,
    "accel.admin": OPERATIONS,
    "accel.accelerator": OPERATIONS,  # the facade and its private parts, FSDP's included
    "accel.cli": EDGE,
    "accel.__main__": EDGE,
}
# Imports that run back up a floor, allowed while they are at most this many.
MAX_BACK_UP = 2
MAX_LINES = 600  # far below the anchors' largest modules; grab-bags still fail (issue 26)


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """``module -> the accel modules it imports`` (all imports, wherever they are)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node, package, modules):
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("accel") and target != name:
                    graph[name].add(target)
    return graph


def _targets(node: ast.AST, package: str, modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    # `from accel.clean import _live` imports the module accel.clean._live.
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def floor_of(module: str) -> int:
    name = module
    while name != "accel" or module == "accel":  # the package's floor is its own only
        if name in FLOORS:
            return FLOORS[name]
        name = name.rpartition(".")[0]
    raise KeyError(f"{module} has no floor")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets)


MODULES = module_files()
GRAPH = import_graph(MODULES)


def test_every_module_has_a_floor() -> None:
    missing = [m for m in MODULES if _has_no_floor(m)]
    assert missing == [], f"add these to FLOORS here and to docs/architecture.md: {missing}"


def _has_no_floor(module: str) -> bool:
    try:
        floor_of(module)
    except KeyError:
        return True
    return False


def test_there_is_no_import_circle() -> None:
    assert circles(GRAPH) == []


def ground_breaches(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in pairs if floor_of(a) == GROUND and floor_of(b) > GROUND]


def workspace_breaches(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in pairs if b == "accel.workspace" and floor_of(a) < FACADE]


def cli_breaches(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [
        (a, b)
        for a, b in pairs
        if floor_of(b) == EDGE and floor_of(a) != EDGE and b != "accel.__main__"
    ]


def back_up(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in pairs if floor_of(a) < floor_of(b)]


def test_the_ground_floor_imports_nothing_above_it() -> None:
    assert ground_breaches(edges(GRAPH)) == []


def test_nothing_below_the_workspace_imports_it() -> None:
    assert workspace_breaches(edges(GRAPH)) == []


def test_nothing_imports_the_cli() -> None:
    assert cli_breaches(edges(GRAPH)) == []


def test_at_most_two_imports_run_back_up_a_floor() -> None:
    assert len(back_up(edges(GRAPH))) <= MAX_BACK_UP, back_up(edges(GRAPH))


def test_no_module_is_over_600_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := _lines(p)) > MAX_LINES}
    assert long == {}


def test_a_run_is_one_package() -> None:
    assert (PACKAGE / "runs" / "__init__.py").is_file()
    assert not (PACKAGE / "runview").exists()


# The store by concern (issue 26): at most this many modules, __init__ included.
MAX_STORE_MODULES = 19


def test_the_store_is_grouped_by_concern() -> None:
    store = [m for m in MODULES if m == "accel.store" or m.startswith("accel.store.")]
    assert len(store) <= MAX_STORE_MODULES, sorted(store)


def owner_of_private(module: str) -> str | None:
    """The package whose private module ``module`` is (``accel.store`` for
    ``accel.store._trace``), or None for a public module. accel's own top-level private
    modules (``accel._fs``, ``accel._locks``) are shared by all of accel."""
    parts = module.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_no_package_imports_another_packages_private_module() -> None:
    reached = sorted(
        (a, b)
        for a, b in edges(GRAPH)
        if (owner := owner_of_private(b)) is not None
        and a != owner
        and not a.startswith(owner + ".")
    )
    assert not reached, reached


def test_the_private_module_rule_sees_what_it_should() -> None:
    assert owner_of_private("accel.store._trace") == "accel.store"
    assert owner_of_private("accel.clean._live") == "accel.clean"
    assert owner_of_private("accel._fs") == "accel"
    assert owner_of_private("accel.store.collectives") is None


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


# -- the analysis itself, on made-up packages -------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = tmp_path / "accel" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(tmp_path / "accel")


def test_every_kind_of_import_is_an_edge(tmp_path: Path) -> None:
    modules = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from accel.b import X\n",
            "b.py": "def f():\n    from . import c\n",
            "c.py": "import accel.d.e\n",
            "d/__init__.py": "from .e import y\n",
            "d/e.py": "from ..a import z\n",
        },
    )
    graph = import_graph(modules)
    assert edges(graph) == [
        ("accel.a", "accel.b"),
        ("accel.b", "accel.c"),
        ("accel.c", "accel.d.e"),
        ("accel.d", "accel.d.e"),
        ("accel.d.e", "accel.a"),
    ]
    assert circles(graph) == [["accel.a", "accel.b", "accel.c", "accel.d.e"]]


def test_a_graph_without_circles_has_none() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# Exceptions that never leave their module: control flow (the launcher's signals, a
# number the JSON reader turns into its own error).
INTERNAL_EXCEPTIONS = {
    "accel.launch._host.Signalled",
    "accel.launch.runner._Diverged",
    "accel._fs._BadNumber",
}
# Where exceptions were defined before errors.py held them all (issue 26): still importable.
MOVED_EXCEPTIONS = {
    "accel.identity": "NotAWorkspace",
    "accel._fs": "DamagedFile",
    "accel.store.tensorfile": "PayloadMissing",
    "accel.store.manifest": "ManifestMissing",
    "accel.store.entry": "MetaMissing",
    "accel.store.lease": "LeaseHeld",
}


def test_every_exception_lives_in_errors() -> None:
    import importlib
    import inspect

    import accel.errors

    outside = set()
    for name in MODULES:
        module = importlib.import_module(name)
        for cls_name, cls in vars(module).items():
            defined_here = inspect.isclass(cls) and cls.__module__ == name
            if defined_here and issubclass(cls, BaseException):
                outside.add(f"{name}.{cls_name}")
    assert {o for o in outside if not o.startswith("accel.errors.")} == INTERNAL_EXCEPTIONS
    for old_home, cls_name in MOVED_EXCEPTIONS.items():
        moved = getattr(importlib.import_module(old_home), cls_name)
        assert moved is getattr(accel.errors, cls_name)


# -- one owner per name on disk (issue 26) ----------------------------------------------
# Where each name on disk is spelled: accel.layout names every folder, file and lock of
# the workspace; a format's own files are named by the one module that owns the format;
# accel._worker_hooks, which workers load by path without accel, spells rank-N and the
# folders it writes (the layout imports them from there). Every module-level string
# constant of an owner is a name (None), or the ones listed. One string may name places
# in two trees, each spelled once by that tree's owner: "checkpoints" is the workspace's
# folder (accel.layout) and Accelerate's in a script's project_dir (accelerator._hfstate).
NAME_OWNERS: dict[str, tuple[str, ...] | None] = {
    "accel.layout": None,
    "accel._worker_hooks": (
        "STACKS_DIR",
        "HEARTBEATS_DIR",
        "RANK_PREFIX",
        "STACK_SUFFIX",
        "CRASH_SUFFIX",
    ),
    "accel._fs": ("TMP_PREFIX",),
    "accel.store.manifest": ("STATE_TENSORS", "TENSORS_SUFFIX"),
    "accel.store.sharded": ("METADATA",),
    "accel.sync._remote": ("INDEX_NAME",),
    "accel.sync.pulled": ("PULLED_NAME",),
    "accel.accelerator._hfstate": ("POINTER", "PROJECT_CHECKPOINTS_DIR"),
}
# Calls whose arguments are parts of a path.
PATH_CALLS = {"Path", "PurePath", "PurePosixPath", "join", "joinpath"}
PATH_CALLS |= {"lock", "lock_file", "lock_path"}  # a lock name is a file name


def owned_names(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    """``name -> the modules that own it``, read from the owners' source."""
    owned: dict[str, set[str]] = defaultdict(set)
    for owner, wanted in NAME_OWNERS.items():
        for node in ast.parse(modules[owner].read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if not (isinstance(target, ast.Name) and isinstance(value, ast.Constant)):
                continue
            if not isinstance(value.value, str) or target.id.startswith("_"):
                continue
            if wanted is None or target.id in wanted:
                owned[value.value].add(owner)
    return dict(owned)


def is_word(name: str) -> bool:
    """A folder or lock name that is also a plain word ("logs", "cache", "state")."""
    return name.isalpha()


def spelled_names(text: str, owned: Collection[str]) -> list[tuple[int, str]]:
    """(line, name) of every owned name a module's code spells as a string.

    A string is split at ``/`` (a relative path) and each part compared exactly. A name
    with a dot, a dash or an underscore (``metrics.jsonl``, ``rank-``, ``.accel-tmp-``)
    means only that file, so it counts wherever it stands. A name that is a plain word
    (``logs``, ``cache``, ``state``) is also a command, a config section, a JSON key or a
    category; it counts where the code uses it as a path: in a string with a ``/``, an
    operand of the path operator ``/``, an argument of a path call (``Path``,
    ``os.path.join``, ``lock``), compared with a part of a split path (``parts[0]``,
    ``parts[:2]``), or the value of a constant named as a path (``*_DIR``, ``*_FILE``,
    ``*_NAME``, ``*_PREFIX``, ``*_SUFFIX``, ``*_LOCK``). An absolute path (``"/tmp"``)
    is the system's, not a workspace's. Docstrings and sentences (a string with a space)
    are for people and do not count.
    """
    tree = ast.parse(text)
    docs = _docstrings(tree)
    as_path = _path_positions(tree)
    pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in docs or any(c.isspace() for c in node.value):
            continue
        absolute = node.value.startswith("/") and id(node) not in pieces
        path = not absolute and ("/" in node.value or id(node) in as_path)
        for part in node.value.split("/"):
            if part in owned and (not is_word(part) or path):
                found.append((node.lineno, part))
    return sorted(found)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstrings of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


PATH_CONSTANT_ENDINGS = ("_DIR", "_FILE", "_NAME", "_PREFIX", "_SUFFIX", "_LOCK")


def _path_positions(tree: ast.AST) -> set[int]:
    """ids of the string constants the code uses as parts of a path."""
    at: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            at += [node.left, node.right]
        elif isinstance(node, ast.Call) and _call_name(node.func) in PATH_CALLS:
            at += node.args
        elif isinstance(node, ast.Compare) and any(
            _is_path_part(x) for x in [node.left, *node.comparators]
        ):
            at += [node.left, *node.comparators]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.endswith(PATH_CONSTANT_ENDINGS) for t in node.targets
        ):
            at.append(node.value)
    ids = set()
    for node in at:
        elements = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
        ids |= {id(e) for e in elements if isinstance(e, ast.Constant)}
    return ids


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def _is_path_part(node: ast.expr) -> bool:
    """``parts[0]`` or ``parts[:2]``: a position of a sequence, as of a split path."""
    if not isinstance(node, ast.Subscript):
        return False
    index = node.slice
    return isinstance(index, ast.Slice) or (
        isinstance(index, ast.Constant) and isinstance(index.value, int)
    )


def test_every_name_on_disk_is_spelled_by_its_owner_only() -> None:
    owned = owned_names()
    spelled = {
        f"{name}:{line}: {word!r} (owner: {' or '.join(sorted(owned[word]))})"
        for name, path in MODULES.items()
        for line, word in spelled_names(path.read_text(encoding="utf-8"), owned)
        if name not in owned[word]
    }
    assert sorted(spelled) == []


def test_the_name_rule_sees_what_it_should() -> None:
    known = {
        "metrics.jsonl",
        "rank-",
        "sharded",
        ".accel-tmp-",
        "run.json",
        "state.tensors",
        "step-",
    }
    assert known <= owned_names().keys()
    owned = {"metrics.jsonl", "logs", "rank-"}
    code = '''
"""Docs may say logs/runs/<id>/metrics.jsonl."""
A = "metrics.jsonl"
B = run / "logs"
C = f"rank-{n}.txt"
D = os.path.join(root, "logs")
E = parts[0] == "logs"
F = "logs/runs"
LOGS_DIR = "logs"
G = app.command("logs")
H = {"logs": 1}["logs"]
I = "see logs/runs/<id>/metrics.jsonl"
J = Path("/logs")
K = f"{run}/logs"
L = ws.lock_path("logs")
'''
    assert spelled_names(code, owned) == [
        (3, "metrics.jsonl"),
        (4, "logs"),
        (5, "rank-"),
        (6, "logs"),
        (7, "logs"),
        (8, "logs"),
        (9, "logs"),
        (14, "logs"),
        (15, "logs"),
    ]
