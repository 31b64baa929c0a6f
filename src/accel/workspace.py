"""The ``.accelerate/`` workspace: discovery, layout and its version.

Found like git finds ``.git``: an explicit path (``--workspace``), else
``ACCEL_WORKSPACE``, else the nearest ``.accelerate/`` in the current folder or its
parents, else a new one in the current folder, created by the first command that writes.

::

    .accelerate/
      .gitignore                     keeps all but config/ out of git (written on creation)
      layout.json                    layout version (refused when newer than this accel)
      config/accelerate_config.yaml  project configuration
      state.bin                      the store (key-value run state)
      locks/                         one lock file per resource, never deleted
      cache/                         cached artifacts
      checkpoints/<series>/          committed checkpoints, one folder per step
      logs/training.log              rotating log of what the workspace did
      logs/runs/<run-id>/            run.json + rank-N.log per ``accel launch``
      tmp/                           staging for atomic writes (crash debris lands here)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel.config.resolve import (
    PROJECT_FILE,
    ConfigLayer,
    ResolvedConfig,
    read_layer,
    resolve,
    user_config_path,
)
from accel.errors import WorkspaceError
from accel.fsutil import atomic_write, atomic_write_json

if TYPE_CHECKING:
    from accel.clean import CleanOutcome
    from accel.store.cache import Cache
    from accel.store.checkpoints import Checkpoints
    from accel.store.kv import Store

DIRNAME = ".accelerate"
ENV_VAR = "ACCEL_WORKSPACE"
LAYOUT_FILE = "layout.json"
LAYOUT_VERSION = 1
GITIGNORE = ".gitignore"
# Like the one `python -m venv` writes: the workspace stays out of git, except the
# project configuration, which belongs with the code.
GITIGNORE_TEXT = f"""\
# Written by accel: git tracks the project configuration, nothing else of the workspace.
*
!{GITIGNORE}
!{PROJECT_FILE.parent.as_posix()}/
!{PROJECT_FILE.as_posix()}
"""


def find_workspace(
    cwd: Path, env: Mapping[str, str], explicit: str | os.PathLike[str] | None = None
) -> Path:
    """Where the workspace is or would be created; pure apart from ``is_dir`` checks."""
    if explicit:
        return _absolute(Path(explicit), cwd)
    if env.get(ENV_VAR):
        return _absolute(Path(env[ENV_VAR]), cwd)
    cwd = _absolute(cwd, Path.cwd())
    for folder in (cwd, *cwd.parents):
        if (folder / DIRNAME).is_dir():
            return folder / DIRNAME
    return cwd / DIRNAME


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

    # -- layout -----------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.path / PROJECT_FILE

    @property
    def layout_file(self) -> Path:
        return self.path / LAYOUT_FILE

    @property
    def locks_dir(self) -> Path:
        return self.path / "locks"

    @cached_property
    def data_path(self) -> Path:
        """Where cache, checkpoints, logs and state live (``workspace.path`` moves them)."""
        relocated = self.config.get("workspace.path")
        if not relocated:
            return self.path
        return _absolute(Path(relocated), self.project_root)

    @property
    def state_file(self) -> Path:
        return self.data_path / "state.bin"

    @property
    def cache_dir(self) -> Path:
        return self.data_path / "cache"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_path / "checkpoints"

    @property
    def logs_dir(self) -> Path:
        return self.data_path / "logs"

    @property
    def runs_dir(self) -> Path:
        return self.logs_dir / "runs"

    @property
    def tmp_dir(self) -> Path:
        return self.data_path / "tmp"

    def lock_path(self, name: str) -> Path:
        """The lock file for resource ``name`` (created on demand, never deleted)."""
        return self.locks_dir / f"{name}.lock"

    def layout_version(self) -> int | None:
        """The version recorded on disk, None for a workspace without a marker."""
        try:
            data = json.loads(self.layout_file.read_text(encoding="utf-8"))
            version = data["layout_version"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            raise WorkspaceError(
                f"{self.layout_file} is unreadable; restore it or delete it so accel rewrites it"
            ) from None
        if not isinstance(version, int) or isinstance(version, bool):
            raise WorkspaceError(f"{self.layout_file}: layout_version must be an integer")
        return version

    def check_layout(self) -> None:
        """Refuse a workspace written by a newer accel instead of misreading it."""
        version = self.layout_version()
        if version is not None and version > LAYOUT_VERSION:
            raise WorkspaceError(
                f"{self.path} has layout version {version}, newer than this accel "
                f"understands ({LAYOUT_VERSION}); upgrade accel to use it"
            )

    def ensure(self) -> Workspace:
        """Create the layout if needed (idempotent, safe to race)."""
        self.check_layout()
        if not self.path.exists():
            self._create_folder()
        try:
            for folder in (self.path / "config", self.locks_dir):
                folder.mkdir(parents=True, exist_ok=True)
            for folder in (self.cache_dir, self.checkpoints_dir, self.runs_dir, self.tmp_dir):
                folder.mkdir(parents=True, exist_ok=True)
            if not self.layout_file.exists():
                atomic_write_json(self.layout_file, {"layout_version": LAYOUT_VERSION})
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create the workspace at {self.path}: {exc.strerror}; "
                "choose another with --workspace or ACCEL_WORKSPACE"
            ) from None
        return self

    def _create_folder(self) -> None:
        """A new workspace comes with its ``.gitignore``."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # ensure() reports it
        self.ensure_gitignore()

    def ensure_gitignore(self) -> None:
        """Write ``.accelerate/.gitignore`` unless there is one (``accel config`` calls it)."""
        target = self.path / GITIGNORE
        if target.exists() or target.is_symlink():
            return
        try:
            atomic_write(target, GITIGNORE_TEXT, durable=False)
        except OSError as exc:
            raise WorkspaceError(f"cannot write {target}: {exc.strerror}") from None

    # -- configuration ------------------------------------------------------------------

    def config_layers(self) -> tuple[ConfigLayer | None, ConfigLayer | None]:
        """(project, user) layers, parsed and validated."""
        self.check_layout()
        user_path = user_config_path(self._env)
        user = read_layer("user", user_path) if user_path else None
        return read_layer("project", self.config_file), user

    @cached_property
    def config(self) -> ResolvedConfig:
        """The effective configuration (validated; raises ConfigError when invalid)."""
        project, user = self.config_layers()
        return resolve(project=project, user=user, env=self._env, flags=self._flags)

    # -- state (see accel.store) --------------------------------------------------------

    @cached_property
    def store(self) -> Store:
        from accel.store.kv import Store

        return Store(self)

    @cached_property
    def cache(self) -> Cache:
        from accel.store.cache import Cache

        return Cache(self)

    @cached_property
    def checkpoints(self) -> Checkpoints:
        from accel.store.checkpoints import Checkpoints

        return Checkpoints(self)

    # -- maintenance --------------------------------------------------------------------

    def clean(self, **selectors: Any) -> CleanOutcome:
        """Plan and (unless ``dry_run=True``) execute a clean; see :func:`accel.clean.clean`."""
        from accel.clean import clean

        return clean(self, **selectors)
