"""The ``.accelerate/`` workspace: discovery, identity, and the facade over its state.

Found like git finds ``.git``: an explicit path (``--workspace``), else
``ACCEL_WORKSPACE``, else the nearest ``.accelerate/`` in the current folder or its
parents, else a new one in the current folder, created by the first command that writes.
What lives where is :mod:`accel.layout`'s to say; a folder accel did not make is never
written to or cleaned (:meth:`Workspace.ensure`, :meth:`Workspace.identify`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel import identity as _identity
from accel import layout as _layout
from accel._locks import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT
from accel.config.resolve import (
    PROJECT_FILE,
    ConfigLayer,
    ResolvedConfig,
    Salvaged,
    read_layer,
    resolve,
    salvage,
    user_config_path,
)
from accel.config.views import Settings
from accel.errors import AccelError, ConfigError, UsageError
from accel.layout import LAYOUT_VERSION, Layout

if TYPE_CHECKING:  # imported when first used: `accel --help` and friends need no store
    from accel.store.cache import Cache
    from accel.store.checkpoints import Checkpoints
    from accel.store.kv import Store

__all__ = ["LAYOUT_VERSION", "Workspace", "find_workspace"]

DIRNAME = _layout.DIRNAME
ENV_VAR = "ACCEL_WORKSPACE"
LAYOUT_FILE = _layout.LAYOUT_FILE
GITIGNORE = _layout.GITIGNORE


def find_workspace(
    cwd: Path, env: Mapping[str, str], explicit: str | os.PathLike[str] | None = None
) -> Path:
    """Where the workspace is or would be created; pure apart from ``is_dir`` checks.

    An empty (or blank) path or variable is refused, never read as unset: a cron line
    whose variable is unset must not fall back to the current folder's workspace.
    """
    if explicit is not None:
        if not str(explicit).strip():
            raise UsageError("the workspace path is empty: give a path, or leave it out")
        return _not_a_project(_absolute(Path(explicit), cwd), "--workspace")
    if ENV_VAR in env:
        if not env[ENV_VAR].strip():
            raise UsageError(f"{ENV_VAR} is set but empty: unset it or give a path")
        return _not_a_project(_absolute(Path(env[ENV_VAR]), cwd), ENV_VAR)
    cwd = _absolute(cwd, Path.cwd())
    for folder in (cwd, *cwd.parents):
        if (folder / DIRNAME).is_dir():
            return folder / DIRNAME
    return cwd / DIRNAME


def _not_a_project(path: Path, given: str) -> Path:
    """``path``, unless it is a project folder: one that holds a ``.accelerate/`` and is no
    workspace itself (the usual slip is naming the project, not its ``.accelerate``)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{given} {path} is a file, not a folder: give a workspace folder")
    inner = path / DIRNAME
    if inner.is_dir() and not (path / LAYOUT_FILE).exists():
        raise UsageError(
            f"{given} {path} is a project folder, not a workspace; did you mean {inner}?"
        )
    return path


def _absolute(path: Path, cwd: Path) -> Path:
    path = path.expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else cwd / path))


class Workspace:
    """A project's ``.accelerate`` folder. ``path`` is that folder itself.

    Reading never creates anything; :meth:`ensure` creates the layout on first write.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        env: Mapping[str, str] | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self._env = dict(os.environ if env is None else env)
        self._flags = dict(flags or {})
        # told the path when ensure() creates a new workspace (the CLI prints a note)
        self.on_create: Callable[[Path], None] | None = None
        self._salvaged: Salvaged | None = None  # see salvage_config

    @classmethod
    def discover(
        cls,
        start: str | os.PathLike[str] | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> Workspace:
        """Find the workspace for ``start`` (default: the current folder)."""
        env = os.environ if env is None else env
        cwd = Path(start) if start is not None else Path.cwd()
        return cls(find_workspace(cwd, env, path), env=env, flags=flags)

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"

    @property
    def exists(self) -> bool:
        return self.path.is_dir()

    @property
    def project_root(self) -> Path:
        return self.path.parent

    # -- layout (see accel.layout) -------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """Every path of this workspace; the data part follows ``workspace.path``."""
        return Layout(self.path, self.data_path)

    @property
    def config_file(self) -> Path:
        return self.path / PROJECT_FILE

    @property
    def layout_file(self) -> Path:
        return self.path / LAYOUT_FILE

    @property
    def locks_dir(self) -> Path:
        return self.path / _layout.LOCKS_DIR

    @cached_property
    def data_path(self) -> Path:
        """Where cache, checkpoints, logs and state live (``workspace.path`` moves them)."""
        return self._data_path(self.settings)

    def _data_path(self, settings: Settings) -> Path:
        relocated = settings.workspace.path
        return _absolute(Path(relocated), self.project_root) if relocated else self.path

    @property
    def state_file(self) -> Path:
        return self.layout.state_file

    @property
    def cache_dir(self) -> Path:
        return self.layout.cache_dir

    @property
    def checkpoints_dir(self) -> Path:
        return self.layout.checkpoints_dir

    @property
    def logs_dir(self) -> Path:
        return self.layout.logs_dir

    @property
    def runs_dir(self) -> Path:
        return self.layout.runs_dir

    @property
    def tmp_dir(self) -> Path:
        return self.layout.tmp_dir

    def lock_path(self, name: str) -> Path:
        """The lock file for resource ``name`` (created on demand, never deleted)."""
        return _layout.lock_file(self.path, name)

    @property
    def lock_timeout(self) -> float:
        """``store.lock_timeout``: how long an acquire waits (the valid part's, where a
        command that only reads salvaged an invalid config; the default where it did not:
        an invalid config must not make locks unbounded)."""
        try:
            return self.reading_settings().store.lock_timeout
        except Exception:  # noqa: BLE001 - see the docstring
            return DEFAULT_LOCK_TIMEOUT

    def layout_version(self) -> int | None:
        """The version recorded on disk, None for a workspace without a marker."""
        marker = _identity.read_marker(self.layout_file)
        return None if marker is None else marker.version

    def check_layout(self) -> None:
        """Refuse a workspace written by a newer accel instead of misreading it."""
        marker = _identity.read_marker(self.layout_file)
        if marker is not None:
            _identity.check_version(marker, self.path)

    def identify(self) -> bool:
        """True for an accel workspace, False when none exists here yet.

        Raises WorkspaceError for a folder accel did not make (``--workspace .`` in a
        project), a ``workspace.path`` that holds someone else's files, or a newer layout.
        Reads only.
        """
        return _identity.identify(self.layout)

    def refusal(self) -> str | None:
        """Why accel must not write to or clean this folder (not made by accel, or a
        ``workspace.path`` holding someone else's files); None when it may. Reads only,
        and an invalid config or a newer layout is not a refusal (they say so themselves).
        """
        if _identity.root_state(self.path) == _identity.FOREIGN:
            return str(_identity.not_a_workspace(self.path))
        try:
            self.identify()
        except _identity.NotAWorkspace as exc:
            return str(exc)
        except AccelError:
            pass
        return None

    def ensure(self) -> Workspace:
        """Create the layout if needed, or check it is accel's (idempotent, safe to race);
        see :func:`accel.identity.ensure`."""
        if _identity.ensure(self.layout) and self.on_create is not None:
            self.on_create(self.path)
        return self

    def ensure_root(self) -> Workspace:
        """Create or check this folder alone, not the data ``workspace.path`` moves: what
        editing the project file needs, so neither an invalid config nor a bad
        ``workspace.path`` stops the command that repairs it (see
        :func:`accel.identity.ensure_root`)."""
        if _identity.ensure_root(self.path) and self.on_create is not None:
            self.on_create(self.path)
        return self

    def check_data_path(self, value: str | None) -> None:
        """Refuse ``value`` as ``workspace.path`` where it holds what is not this
        workspace's, before the project file names it (reads only)."""
        if not value:
            return
        layout = Layout(self.path, _absolute(Path(value), self.project_root))
        marker = _identity.read_marker(self.layout_file)
        root_id = marker.id if marker is not None else None
        if layout.relocated and _identity.data_state(layout, root_id) == _identity.FOREIGN:
            raise _identity.not_our_data(layout)

    def ensure_gitignore(self) -> None:
        """Write ``.accelerate/.gitignore`` unless there is one (``accel config`` calls it)."""
        _identity.ensure_gitignore(self.path)

    # -- configuration ------------------------------------------------------------------

    def config_layers(self) -> tuple[ConfigLayer | None, ConfigLayer | None]:
        """(project, user) layers, parsed and validated."""
        self.check_layout()
        user_path = user_config_path(self._env)
        user = read_layer("user", user_path, env=self._env) if user_path else None
        return read_layer("project", self.config_file), user

    @cached_property
    def config(self) -> ResolvedConfig:
        """The effective configuration (validated; raises ConfigError when invalid)."""
        project, user = self.config_layers()
        return resolve(project=project, user=user, env=self._env, flags=self._flags)

    @property
    def settings(self) -> Settings:
        """The configuration's typed views: ``ws.settings.checkpoints.keep_last``."""
        return self.config.settings

    def salvage_config(self) -> Salvaged | None:
        """For commands that only read: None for a valid config; for an invalid one, its
        error and how the command goes on without it (:class:`Salvaged`).

        Its valid part stands (``workspace.path`` among it, which says where the data
        is), every invalid value is left out: :meth:`reading_settings` are those. The
        config itself stays invalid (:attr:`config`, :attr:`settings` still raise), so
        nothing that writes goes on with it. Only a :class:`ConfigError` is salvaged: a
        layout this accel does not know is still refused.
        """
        try:
            _ = self.config
        except ConfigError as exc:
            user = user_config_path(self._env)
            files = (("user", user), ("project", self.config_file))
            self._salvaged = salvage(exc, files, self._env, self._flags)
            # the cached_property's slot: the data folder of the valid part
            self.__dict__["data_path"] = self._data_path(self._salvaged.config.settings)
            return self._salvaged
        return None

    def reading_settings(self) -> Settings:
        """The settings of a command that only reads: the config's own, or after
        :meth:`salvage_config` found it invalid, its valid part over the defaults."""
        if self._salvaged is not None:
            return self._salvaged.config.settings
        return self.settings

    # -- state (see accel.store): each store gets the paths and settings it needs -------

    @cached_property
    def store(self) -> Store:
        from accel.store.kv import Store

        return Store(self.layout, self.settings.store)

    @cached_property
    def cache(self) -> Cache:
        from accel.store.cache import Cache

        return Cache(self.layout, self.settings.store)

    @cached_property
    def checkpoints(self) -> Checkpoints:
        from accel.store.checkpoints import Checkpoints

        return Checkpoints(
            self.layout, self.settings.checkpoints, run_name=self.settings.launch.run_name
        )

    def log(self, message: str, level: str = "info", *, command: str | None = None) -> bool:
        """Append one line to ``logs/training.log`` (see :func:`accel.training_log.log_event`);
        False when it was not written. Never raises, never creates the workspace."""
        from accel.training_log import log_event

        try:
            layout = self.layout
        except Exception:  # noqa: BLE001 - an invalid config cannot say where data lives
            layout = Layout(self.path, self.path)
        try:
            settings = self.settings.logs
        except Exception:  # noqa: BLE001 - an invalid config still gets its errors logged
            settings = None
        return log_event(layout, settings, message, level, command=command)
