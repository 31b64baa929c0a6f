"""Framework caches kept in the workspace: ``cache/frameworks/<name>/``.

torch.compile's Inductor and Triton write their compiled kernels to ``/tmp`` by default,
which a reboot empties and every project shares. ``accel launch`` points them into the
workspace instead, so a second launch reuses the first one's kernels, ``accel status``
shows their size and ``accel clean --only frameworks`` removes them:

============  ========================  ==========================================
name          variable                  default
============  ========================  ==========================================
inductor      ``TORCHINDUCTOR_CACHE_DIR``  on
triton        ``TRITON_CACHE_DIR``         on
hf            ``HF_HOME``                  opt-in (usually shared across projects)
torch_hub     ``TORCH_HOME``               opt-in (usually shared across projects)
============  ========================  ==========================================

``cache.framework_caches`` in the config selects them. A variable the user already set
(to anything but the empty string) is never overridden. Pure apart from
:func:`scan_framework_caches`, which reads sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from accel._fs import TreeUsage, tree_usage
from accel.config.fields import BY_KEY
from accel.config.views import CacheSettings
from accel.layout import FRAMEWORKS_DIR

__all__ = [
    "DEFAULT",
    "FRAMEWORKS",
    "FrameworkCache",
    "framework_dir",
    "framework_env",
    "frameworks_root",
    "scan_framework_caches",
]

FRAMEWORKS: dict[str, str] = {
    "inductor": "TORCHINDUCTOR_CACHE_DIR",
    "triton": "TRITON_CACHE_DIR",
    "hf": "HF_HOME",
    "torch_hub": "TORCH_HOME",
}
DEFAULT = tuple(BY_KEY["cache.framework_caches"].default)  # the schema's, for an invalid config
DIRNAME = FRAMEWORKS_DIR


def frameworks_root(cache_dir: Path) -> Path:
    return cache_dir / DIRNAME


def framework_dir(cache_dir: Path, name: str) -> Path:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework cache {name!r}: one of {', '.join(FRAMEWORKS)}")
    return frameworks_root(cache_dir) / name


def framework_env(names: Iterable[str], cache_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to the workers' environment (those ``env`` lacks)."""
    out: dict[str, str] = {}
    for name in dict.fromkeys(names):
        path = framework_dir(cache_dir, name)
        if not env.get(FRAMEWORKS[name]):
            out[FRAMEWORKS[name]] = str(path)
    return out


@dataclass(frozen=True)
class FrameworkCache:
    """One framework cache: where accel points it and what it holds now."""

    name: str
    variable: str
    path: Path
    enabled: bool
    size: int
    files: int
    newest: float | None  # mtime of the newest file, None when empty

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "variable": self.variable,
            "path": str(self.path),
            "enabled": self.enabled,
            "size": self.size,
            "files": self.files,
            "newest": self.newest,
        }


def scan_framework_caches(
    cache_dir: Path,
    settings: CacheSettings | None,
    usage: Callable[[Path], TreeUsage] = tree_usage,
) -> list[FrameworkCache]:
    """Every framework cache enabled in ``settings`` (None, for an invalid config: the
    default ones) or present on disk under ``cache_dir``; ``usage`` measures each (a
    command that walked the workspace already measures from its walk)."""
    enabled = set(DEFAULT if settings is None else settings.framework_caches)
    found = []
    for name, var in FRAMEWORKS.items():
        path = framework_dir(cache_dir, name)
        size, files, newest = usage(path)
        if name in enabled or files:
            found.append(FrameworkCache(name, var, path, name in enabled, size, files, newest))
    return found
