"""Which folder is an accel workspace: the markers that say so, and the check every
command that writes or deletes makes first.

A folder is a workspace when it holds ``layout.json``. The first command that writes
creates one only in a folder that does not exist yet, is empty, or holds nothing but a
project config (a config committed to git) and lock files; any other folder is refused
(:func:`root_state`). A relocated data folder (``workspace.path``) carries its own
marker, ``accel-data.json``, naming the workspace it belongs to (the ``id`` in its
``layout.json``), so a shared folder, or another workspace's data, is refused too.

Floor 1 (see docs/architecture.md): it takes a :class:`~accel.layout.Layout` (paths),
never the workspace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel import _locks
from accel._fs import atomic_write, atomic_write_json, read_json
from accel.errors import DamagedFile, NotAWorkspace, WorkspaceError
from accel.layout import (
    CONFIG_DIR,
    CONFIG_NAME,
    DIRNAME,
    GITIGNORE,
    HOLDER_SUFFIX,
    LAYOUT_FILE,
    LAYOUT_LOCK,
    LAYOUT_VERSION,
    LAYOUT_VERSIONS,
    LOCK_SUFFIX,
    LOCKS_DIR,
    Layout,
    is_atomic_temp,
)

__all__ = [
    "ABSENT",
    "FOREIGN",
    "OURS",
    "NotAWorkspace",
    "ensure",
    "ensure_gitignore",
    "establish",
    "identify",
    "not_a_workspace",
    "read_marker",
    "root_state",
]

# Like the one `python -m venv` writes: the workspace stays out of git, except the
# project configuration, which belongs with the code.
GITIGNORE_TEXT = f"""\
# Written by accel: git tracks the project configuration, nothing else of the workspace.
*
!{GITIGNORE}
!{CONFIG_DIR}/
!{CONFIG_DIR}/{CONFIG_NAME}
"""

ABSENT = "absent"  # nothing there yet (or only a project config): created on first write
OURS = "workspace"
FOREIGN = "foreign"


@dataclass(frozen=True)
class Marker:
    """What ``layout.json`` (or a data folder's ``accel-data.json``) says."""

    version: int
    id: str | None


def read_marker(path: Path, id_key: str = "id", *, fix: str | None = None) -> Marker | None:
    """The marker at ``path``; None when there is none. WorkspaceError naming what is
    wrong when it is damaged or its ``layout_version`` is none an accel writes (and
    ``fix``, what to write instead, else ``layout.json``'s); a newer one is returned
    (:func:`check_version` refuses it, naming the upgrade)."""
    try:
        data: Any = read_json(path)
    except FileNotFoundError:
        return None
    except (DamagedFile, NotADirectoryError) as exc:
        if not path.parent.is_dir():  # nothing to restore: a file stands where a folder must
            raise not_a_folder(path.parent) from None
        raise damaged_marker(path, getattr(exc, "why", str(exc)), fix) from None
    except OSError as exc:
        raise damaged_marker(path, f"cannot be read ({exc.strerror or exc})", fix) from None
    problem = _version_problem(data)
    if problem is not None:
        raise damaged_marker(path, problem, fix)
    ident = data.get(id_key)
    return Marker(data["layout_version"], ident if isinstance(ident, str) and ident else None)


def _version_problem(data: Any) -> str | None:
    """What is wrong with a marker's ``layout_version``: the versions this accel reads
    are an allowlist (:data:`~accel.layout.LAYOUT_VERSIONS`), and only one above them
    all (a newer accel's) passes besides."""
    if not isinstance(data, dict):
        return "is not a JSON object"
    if "layout_version" not in data:
        return "has no layout_version"
    version = data["layout_version"]
    if type(version) is not int:  # not bool: True == 1; not float: 1.0 == 1
        return f"has layout_version {json.dumps(version)[:40]}, not a whole number"
    if version not in LAYOUT_VERSIONS and version < max(LAYOUT_VERSIONS):
        known = ", ".join(map(str, sorted(LAYOUT_VERSIONS)))
        return f"has layout_version {version}, which no accel writes (this one reads {known})"
    return None


def not_a_folder(folder: Path) -> WorkspaceError:
    """The line for a workspace or data folder whose path runs through a file."""
    file = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    where = f"{file} is a file, not a folder" if file else "a part of its path is no folder"
    return WorkspaceError(f"{folder} cannot be a workspace folder: {where}; give a folder")


def damaged_marker(path: Path, why: str, fix: str | None = None) -> WorkspaceError:
    """The one line for a damaged ``layout.json`` (or ``accel-data.json``): what is
    wrong, and how to fix it."""
    fix = fix or f'write {{"layout_version": {LAYOUT_VERSION}}} into it if this folder is accel\'s'
    return WorkspaceError(f"{path} {why}; restore it, or {fix}")


def read_data_marker(layout: Layout, root_id: str | None) -> Marker | None:
    """The relocated data folder's ``accel-data.json``. Damaged, the fix it names is the
    marker naming this workspace (``root_id``): one without an id would be any
    workspace's to claim, the very thing the marker is there to prevent."""
    fix = None
    if root_id is not None:
        text = json.dumps({"layout_version": LAYOUT_VERSION, "workspace_id": root_id})
        fix = f"write {text} into it if this folder is the data of {layout.root}"
    return read_marker(layout.data_marker, "workspace_id", fix=fix)


def root_state(root: Path) -> str:
    """:data:`OURS` (it holds ``layout.json``), :data:`ABSENT` (missing, empty, or only a
    project config) or :data:`FOREIGN` (a folder accel did not make)."""
    if (root / LAYOUT_FILE).exists():
        return OURS
    try:
        names = set(os.listdir(root))
    except FileNotFoundError:
        return ABSENT
    except OSError:  # a file, or a folder that cannot be read
        return FOREIGN
    if LAYOUT_FILE in names and (root / LAYOUT_FILE).exists():
        return OURS  # another process made it between the two looks
    return FOREIGN if _not_ours(root, names) else ABSENT


def _not_ours(root: Path, names: set[str]) -> list[str]:
    """The entries of a folder without ``layout.json`` that a new workspace would not
    hold, sorted: none for a folder accel may make its workspace in."""
    kept = {CONFIG_DIR: _only_config, LOCKS_DIR: _only_locks}
    # A temporary of accel's own atomic write: another process is making this workspace
    # (its .gitignore or layout.json is being written), which is not a foreign folder.
    return sorted(
        name
        for name in names - {GITIGNORE}
        if not (is_atomic_temp(name) or (name in kept and kept[name](root / name)))
    )


def _only_config(folder: Path) -> bool:
    """A ``config/`` folder holding at most the project file: a config committed to git."""
    return _plain_dir_of(folder, lambda name: name == CONFIG_NAME or is_atomic_temp(name))


def _only_locks(folder: Path) -> bool:
    """A ``locks/`` folder of lock files: left by a first write that was interrupted."""
    return _plain_dir_of(
        folder, lambda name: name.endswith((LOCK_SUFFIX, HOLDER_SUFFIX)) or is_atomic_temp(name)
    )


def _plain_dir_of(folder: Path, allowed: Callable[[str], bool]) -> bool:
    try:
        if os.path.islink(folder) or not os.path.isdir(folder):
            return False
        return all(allowed(name) for name in os.listdir(folder))
    except OSError:
        return False


def data_state(layout: Layout, root_id: str | None) -> str:
    """The relocated data folder: :data:`ABSENT` (missing or empty), :data:`OURS` (its
    marker names this workspace, or the root has no id yet) or :data:`FOREIGN`."""
    marker = read_data_marker(layout, root_id)
    names: list[str] = []
    if marker is None:
        try:
            names = os.listdir(layout.data)
        except FileNotFoundError:
            return ABSENT
        except OSError:
            return FOREIGN
        if layout.data_marker.name in names:  # written between the two looks
            marker = read_data_marker(layout, root_id)
    if marker is not None:
        return OURS if root_id is None or marker.id in (None, root_id) else FOREIGN
    # a temporary of ours is the marker being written by another process
    return ABSENT if all(is_atomic_temp(name) for name in names) else FOREIGN


def not_a_workspace(root: Path) -> NotAWorkspace:
    try:
        names = _not_ours(root, set(os.listdir(root)))
    except OSError:
        names = []
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    if root.name == DIRNAME and names:  # a project's own folder, with files of others
        return NotAWorkspace(
            f"{root} is not an accel workspace: it holds {shown}, which accel did not "
            f"write; move {'it' if len(names) == 1 else 'them'} elsewhere, or point "
            "--workspace at another folder"
        )
    held = f" (it holds {shown})" if names else ""
    return NotAWorkspace(
        f"{root} is not an accel workspace{held}: point --workspace at a project's "
        ".accelerate or at a new or empty folder"
    )


def not_our_data(layout: Layout) -> NotAWorkspace:
    whose = _owner_of(layout.data_marker)
    what = (
        f"holds the data of another accel workspace{whose}"
        if whose is not None
        else ("holds files accel did not write")
    )
    return NotAWorkspace(
        f"{layout.data} (workspace.path) {what}: point workspace.path at a new or empty "
        "folder of its own"
    )


def _owner_of(marker: Path) -> str | None:
    try:
        data = read_json(marker)
    except (OSError, ValueError):
        return None
    where = data.get("workspace") if isinstance(data, dict) else None
    return f" ({where})" if isinstance(where, str) else ""


def check_version(marker: Marker, where: Path) -> None:
    """Refuse a layout newer than this accel reads (:func:`read_marker` refused the rest
    that are not on the allowlist)."""
    if marker.version not in LAYOUT_VERSIONS:
        raise WorkspaceError(
            f"{where} has layout version {marker.version}, newer than this accel "
            f"understands ({LAYOUT_VERSION}); upgrade accel to use it"
        )


def identify(layout: Layout) -> bool:
    """True for an accel workspace, False for none yet; WorkspaceError for a folder (or a
    relocated data folder) that accel did not make, or a newer layout. Reads only."""
    state = root_state(layout.root)
    if state == FOREIGN:
        raise not_a_workspace(layout.root)
    if state == ABSENT:
        return False
    marker = read_marker(layout.layout_file)
    if marker is None:  # removed since root_state looked
        raise not_a_workspace(layout.root)
    check_version(marker, layout.root)
    if layout.relocated and data_state(layout, marker.id) == FOREIGN:
        raise not_our_data(layout)
    return True


def establish(layout: Layout) -> bool:
    """Make ``layout`` an accel workspace, or check that it is one (idempotent, race-safe).

    Refuses (WorkspaceError) a root or data folder that holds what accel did not write.
    True when this call made a new workspace (wrote its first ``layout.json``).
    """
    if identify(layout) and _complete(layout):
        return False
    layout.locks_dir.mkdir(parents=True, exist_ok=True)
    with _locks.locked(layout.lock(LAYOUT_LOCK), timeout=30.0):
        identify(layout)  # again, under the lock: another process may have made it
        marker = read_marker(layout.layout_file)
        created = marker is None
        if marker is None or marker.id is None:
            marker = _write_root_marker(layout, marker)
        if layout.relocated:
            _claim_data(layout, marker)
        for folder in layout.folders():
            folder.mkdir(parents=True, exist_ok=True)
    return created


def _complete(layout: Layout) -> bool:
    if layout.relocated and not layout.data_marker.exists():
        return False
    return all(folder.is_dir() for folder in layout.folders())


def _write_root_marker(layout: Layout, old: Marker | None) -> Marker:
    ident = None
    if layout.relocated:  # an id-less root adopts the id its data folder already names
        data = read_data_marker(layout, None)  # no id to name: the root's is being made
        ident = data.id if data is not None else None
    marker = Marker(old.version if old else LAYOUT_VERSION, ident or os.urandom(8).hex())
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(layout.layout_file, {"layout_version": marker.version, "id": marker.id})
    return marker


def _claim_data(layout: Layout, root: Marker) -> None:
    found = read_data_marker(layout, root.id)
    if found is not None:
        check_version(found, layout.data)
        if found.id == root.id:
            return
        if found.id is not None:
            raise not_our_data(layout)
    elif data_state(layout, root.id) == FOREIGN:  # a new workspace's: identify() did not look
        raise not_our_data(layout)
    layout.data.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        layout.data_marker,
        {"layout_version": LAYOUT_VERSION, "workspace_id": root.id, "workspace": str(layout.root)},
    )


def ensure(layout: Layout) -> bool:
    """Create the workspace if needed, or check it is accel's (idempotent, safe to race).

    Every write comes through here: a folder accel did not make is refused before
    anything is written to it. A new workspace gets its ``.gitignore``. True when this
    call created the workspace.
    """
    if not layout.root.exists():
        _create_root(layout.root)
    try:
        created = establish(layout)
        if created:  # also where .accelerate/ held only a config committed to git
            ensure_gitignore(layout.root)
        return created
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create the workspace at {layout.root}: {exc.strerror}; "
            "choose another with --workspace or ACCEL_WORKSPACE"
        ) from None


def ensure_root(root: Path) -> bool:
    """Create the workspace folder itself (``layout.json``, ``config/``, ``locks/``) or
    check it is accel's, leaving its data alone: the data folder follows the config,
    which may be what is being repaired. The marker it writes names no id; the first
    :func:`ensure` gives it one (or adopts the relocated data's). True when created."""
    layout = Layout(root, root)  # the root alone: a relocated data folder is not looked at
    if not root.exists():
        _create_root(root)
    try:
        if identify(layout) and (root / CONFIG_DIR).is_dir():
            return False
        layout.locks_dir.mkdir(parents=True, exist_ok=True)
        with _locks.locked(layout.lock(LAYOUT_LOCK), timeout=30.0):
            created = not identify(layout)  # again, under the lock
            if created:
                atomic_write_json(layout.layout_file, {"layout_version": LAYOUT_VERSION})
            (root / CONFIG_DIR).mkdir(exist_ok=True)
        if created:
            ensure_gitignore(root)
        return created
    except OSError as exc:
        raise WorkspaceError(
            f"cannot create the workspace at {root}: {exc.strerror}; "
            "choose another with --workspace or ACCEL_WORKSPACE"
        ) from None


def _create_root(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # establish() reports it
    ensure_gitignore(root)


def ensure_gitignore(root: Path) -> None:
    """Write ``.accelerate/.gitignore`` unless there is one (``accel config`` calls it)."""
    target = root / GITIGNORE
    if target.exists() or target.is_symlink():
        return
    try:
        atomic_write(target, GITIGNORE_TEXT, durable=False)
    except OSError as exc:
        raise WorkspaceError(f"cannot write {target}: {exc.strerror}") from None
