"""Layered configuration: flag > ACCEL_* environment > project file > user file > default.

``resolve()`` is pure: it takes the parsed layers and the environment as arguments and
returns a :class:`ResolvedConfig` that knows where every value came from.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._version import UPGRADE_HINT
from accel.config import schema
from accel.config.views import Settings
from accel.config.yamlio import LoadedYaml, load_yaml_file
from accel.errors import ConfigError, UsageError
from accel.layout import CONFIG_DIR, CONFIG_NAME

PROJECT_FILE = Path(CONFIG_DIR) / CONFIG_NAME


@dataclass(frozen=True)
class Origin:
    """Where a value came from: ``layer`` is flag, env, project, user or default."""

    layer: str
    source: str = ""
    line: int | None = None

    def __str__(self) -> str:
        if self.layer in ("project", "user") and self.line:
            return f"{self.layer} ({self.source}:{self.line})"
        return f"{self.layer} ({self.source})" if self.source else self.layer


@dataclass(frozen=True)
class ConfigLayer:
    """One parsed file: flat ``values`` by dotted key, validated, with their lines."""

    name: str
    path: Path
    values: Mapping[str, Any]
    lines: Mapping[str, int]


@dataclass(frozen=True)
class ResolvedConfig:
    values: Mapping[str, Any]
    origins: Mapping[str, Origin]

    def __getitem__(self, key: str) -> Any:
        return self.values[schema.field(key).key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def settings(self) -> Settings:
        """The typed views of these values (:mod:`accel.config.views`)."""
        return Settings.of(self.values)

    def nested(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for key, value in self.values.items():
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        return out


def user_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The user file in the platform's config folder (None when HOME is unknown)."""
    env = os.environ if env is None else env
    if env.get("ACCEL_USER_CONFIG"):
        return Path(env["ACCEL_USER_CONFIG"])
    if sys.platform == "win32" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "accel" / "config.yaml"
    home = env.get("HOME")
    if sys.platform == "darwin" and home:
        return Path(home) / "Library" / "Application Support" / "accel" / "config.yaml"
    base = env.get("XDG_CONFIG_HOME") or (str(Path(home) / ".config") if home else "")
    return Path(base) / "accel" / "config.yaml" if base else None


def _refuse(error: ConfigError, refused: list[ConfigError] | None) -> None:
    """Raise ``error``; or, where a command that only reads salvages the config
    (``refused`` given), keep it there and go on without what it is about."""
    if refused is None:
        raise error from None
    refused.append(error)


def validate_document(
    loaded: LoadedYaml, source: str, *, refused: list[ConfigError] | None = None
) -> tuple[dict[str, Any], dict[str, int]]:
    """Check a parsed file against the schema; return flat values and their lines.

    The first error is raised; with ``refused``, every error goes there instead and the
    values are the valid ones (see :func:`_refuse`).
    """
    data = loaded.data
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        error = f"{source}: expected a mapping of sections (launch:, cache:, ...)"
        _refuse(ConfigError(error), refused)
        return {}, {}
    values: dict[str, Any] = {}
    for section, body in data.items():
        line = loaded.lines.get(str(section), 0)
        if section == "version":
            _check_version(body, source, line, refused)
        elif section not in schema.SECTIONS:
            error = f"{source}:{line}: unknown section {section!r}{schema.suggest(str(section))}"
            _refuse(ConfigError(error), refused)
        elif body is not None and not isinstance(body, dict):
            error = f"{source}:{line}: section {section!r} must be a mapping of keys"
            _refuse(ConfigError(error), refused)
        else:
            _section_values(loaded, source, str(section), body or {}, values, refused)
    lines = {k: loaded.lines[k] for k in values if k in loaded.lines}
    return values, lines


def _section_values(
    loaded: LoadedYaml,
    source: str,
    section: str,
    body: dict[Any, Any],
    values: dict[str, Any],
    refused: list[ConfigError] | None,
) -> None:
    line = loaded.lines.get(section, 0)
    for name, raw in body.items():
        key = f"{section}.{name}"
        kline = loaded.lines.get(key, line)
        if key not in schema.BY_KEY:
            error = f"{source}:{kline}: unknown key {key!r}{schema.suggest(key)}"
            _refuse(ConfigError(error, key=key), refused)
            continue
        try:
            values[key] = schema.coerce(schema.BY_KEY[key], raw)
        except ValueError as exc:
            _refuse(ConfigError(f"{source}:{kline}: {key}: {exc}", key=key), refused)


def _check_version(value: Any, source: str, line: int, refused: list[ConfigError] | None) -> None:
    number = isinstance(value, int) and not isinstance(value, bool)  # `true` == 1 in Python
    if number and value == schema.SCHEMA_VERSION:
        return
    if number and value > schema.SCHEMA_VERSION:
        error = (
            f"{source}:{line}: config version {value} was written by a newer accel; "
            f"upgrade accel ({UPGRADE_HINT}) to read it"
        )
    else:
        error = f"{source}:{line}: version: expected {schema.SCHEMA_VERSION}, got {value!r}"
    _refuse(ConfigError(error), refused)


def read_layer(
    name: str,
    path: Path,
    *,
    refused: list[ConfigError] | None = None,
    env: Mapping[str, str] | None = None,
) -> ConfigLayer | None:
    """Parse and validate one config file; None when it does not exist (or, with
    ``refused``, when it cannot be read at all: see :func:`validate_document`). ``env``:
    the environment ``path`` was found in (:func:`user_config_path`'s), for the hint."""
    if not path.is_file():
        if path.exists():
            fix = _make_it_a_file(name, os.environ if env is None else env)
            _refuse(ConfigError(f"{path}: not a regular file; {fix}"), refused)
        return None
    try:
        loaded = load_yaml_file(path)
    except ConfigError as exc:
        _refuse(exc, refused)
        return None
    values, lines = validate_document(loaded, str(path), refused=refused)
    return ConfigLayer(name, path, values, lines)


def _make_it_a_file(layer: str, env: Mapping[str, str]) -> str:
    """What to do about a config path that is a folder, a FIFO or a device."""
    if layer == "user":
        if env.get("ACCEL_USER_CONFIG"):
            return "point ACCEL_USER_CONFIG at a YAML file, or unset it"
        return "move it away (the user config is a YAML file)"
    if layer == "project":
        return "move it away; `accel config --default` writes a new one"
    return "give a YAML file"


def env_values(
    env: Mapping[str, str], *, refused: list[ConfigError] | None = None
) -> dict[str, tuple[Any, str]]:
    """Values set by ``ACCEL_*`` twins, with the variable each came from (an invalid
    one raises, or with ``refused`` is left out)."""
    out: dict[str, tuple[Any, str]] = {}
    for f in schema.FIELDS:
        if f.env_var in env:
            try:
                out[f.key] = (schema.parse_text(f, env[f.env_var]), f.env_var)
            except ValueError as exc:
                error = ConfigError(f"environment variable {f.env_var}: {exc}", key=f.key)
                _refuse(error, refused)
    return out


# accel's own variables that are not the twin of a config key (``Field.env_var``): read or
# set by the CLI, the launcher and the workers. tests/config keeps this list equal to the
# ``ACCEL_*`` names in src, so a new variable cannot be taken for a typo.
OWN_ENV_VARS = frozenset(
    {
        "ACCEL_WORKSPACE",  # workspace discovery (--workspace)
        "ACCEL_USER_CONFIG",  # the user config file
        "ACCEL_RUN_ID",  # set by the launcher for every worker
        "ACCEL_RUN_NAME",
        "ACCEL_RUN_DIR",
        "ACCEL_LAUNCHER_PID",
        "ACCEL_LOCAL_RANK",  # the local rank a scheduler gave a rank it started (_bootstrap)
        "ACCEL_RDZV_CONNECT_TIMEOUT",  # rendezvous tuning (launch/rendezvous.py)
        "ACCEL_RDZV_REPORT_INTERVAL",
        "ACCEL_RDZV_LAST_CALL",
        "ACCEL_SYNC_ENDPOINT_URL",  # the S3 endpoint (sync/_remote.py)
        "ACCEL_NO_FAST_EXIT",  # the CLI's exit without teardown, off
        "ACCEL_SNAPSHOT_DIR",  # the memory tier's folder, set by the launcher (store/memtier.py)
        "ACCEL_SHM_DIR",  # where the launcher makes it: a tmpfs, /dev/shm by default
    }
)


def env_warnings(env: Mapping[str, str]) -> list[str]:
    """One line for each ``ACCEL_*`` variable accel does not read, with the closest name.

    A warning, not an error: a stray variable in a shell must not stop every command
    (an unknown key in a config file is an error: that file is accel's alone).
    """
    twins = {f.env_var for f in schema.FIELDS}
    known = sorted(twins | OWN_ENV_VARS)
    out = []
    for name in sorted(env):
        if not name.startswith("ACCEL_") or name in twins or name in OWN_ENV_VARS:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]}?" if close else " (`accel config show` lists the keys)"
        out.append(f"environment variable {name} is not one accel reads, so it is ignored{hint}")
    return out


def resolve(
    *,
    project: ConfigLayer | None,
    user: ConfigLayer | None,
    env: Mapping[str, str],
    flags: Mapping[str, Any] | None = None,
    refused: list[ConfigError] | None = None,
) -> ResolvedConfig:
    """Combine the layers, highest first: flags, environment, project, user, default.

    ``refused``: an invalid environment variable goes there and is left out (a salvage,
    see :func:`salvage`), instead of being raised; so does a broken rule of two keys
    (:func:`_check_together`), with the key at fault read as if unset.
    """
    values, origins = _layered(project, user, env, flags, refused)
    _check_together(values, origins, refused)
    return ResolvedConfig(values, origins)


def _layered(
    project: ConfigLayer | None,
    user: ConfigLayer | None,
    env: Mapping[str, str],
    flags: Mapping[str, Any] | None,
    refused: list[ConfigError] | None,
) -> tuple[dict[str, Any], dict[str, Origin]]:
    values = schema.defaults()
    origins = {key: Origin("default") for key in values}
    for layer in (user, project):
        if layer is None:
            continue
        for key, value in layer.values.items():
            values[key] = value
            origins[key] = Origin(layer.name, str(layer.path), layer.lines.get(key))
    for key, (value, var) in env_values(env, refused=refused).items():
        values[key] = value
        origins[key] = Origin("env", var)
    for key, value in (flags or {}).items():
        if value is not None:
            values[key] = flag_value(key, value)
            origins[key] = Origin("flag")
    return values, origins


_TOGETHER = ("checkpoints.snapshot_every", "checkpoints.persist_every")


def snapshot_problem(every: int | None, persist: int | None) -> str | None:
    """What is wrong with ``checkpoints.snapshot_every`` and ``persist_every`` together
    (a persisted step must be a snapshot's), None when nothing: the one rule, which
    every resolved config and the memory tier's settings are checked by."""
    if persist is not None and every is None:
        return (
            "checkpoints.persist_every needs checkpoints.snapshot_every: set both, or "
            "neither (save_state saves without them)"
        )
    if every is not None and persist is not None and persist % every:
        return (
            f"checkpoints.persist_every ({persist}) must be a multiple of "
            f"checkpoints.snapshot_every ({every}): only snapshots are persisted"
        )
    return None


def _check_together(
    values: dict[str, Any], origins: dict[str, Origin], refused: list[ConfigError] | None
) -> None:
    """The rules of two keys, on the combined layers (a file's key may meet another
    file's or a variable's); salvaged, ``persist_every`` is read as if unset."""
    every, persist = _TOGETHER
    problem = snapshot_problem(values[every], values[persist])
    if problem is None:
        return
    _refuse(ConfigError(problem, key=persist), refused)
    values[persist], origins[persist] = None, Origin("default")


def check_edit(path: Path, values: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Refuse an edit that makes the project file at ``path`` hold ``values`` when the
    configuration it makes breaks a rule of two keys (with the user file and ``env``)
    and the file takes part: a variable alone breaking one is not the file's to refuse,
    and the other layers' own errors are left to the commands that read them."""
    user_path = user_config_path(env)
    others: list[ConfigError] = []
    user = read_layer("user", user_path, refused=others, env=env) if user_path else None
    project = ConfigLayer("project", path, values, {})
    combined, origins = _layered(project, user, env, None, others)
    if any(origins[key].layer == "project" for key in _TOGETHER):
        _check_together(combined, origins, None)


def flag_value(key: str, value: Any, *, named: str | None = None) -> Any:
    """Validate a command-line value for ``key`` (strings are parsed like env values).

    The error names ``named`` (``config set`` passes the key itself), else the flag.
    """
    f = schema.field(key)
    try:
        return schema.read_value(f, value)
    except ValueError as exc:
        name = named or "--" + key.split(".", 1)[1].replace("_", "-")
        raise UsageError(f"invalid value for {name}: {exc}") from None


def config_fix(config_file: Path, exc: ConfigError) -> str | None:
    """The command that repairs a config error: unset the bad key of the project file
    ``config_file``, or the bad variable; None for a YAML error or the user file (an
    edit by hand, at the line named)."""
    text = str(exc)
    variable = re.match(r"environment variable ([A-Z0-9_]+):", text)
    if variable:
        return f"unset {variable.group(1)}"
    if exc.key and text.startswith(f"{config_file}:"):
        return f"accel config unset {exc.key}"
    return None


@dataclass(frozen=True)
class Salvaged:
    """An invalid configuration as a command that only reads goes on with it: ``config``
    holds every valid value where it was set and the default (or a lower layer's value)
    for the rest; ``error`` is the first error, as validation words it."""

    config: ResolvedConfig
    error: ConfigError
    fell_back: tuple[str, ...]  # the keys whose value was refused
    unread: tuple[Path, ...]  # the files of which nothing could be kept

    def going_on(self, data: Path) -> str:
        """How the command goes on, for the end of its warning; where the data is read
        when ``workspace.path``, which says so, may be what was lost."""
        said = []
        if self.fell_back:
            said.append(f"with {', '.join(self.fell_back)} as if unset")
        if len(self.unread) == 1 and str(self.error).startswith(str(self.unread[0])):
            said.append("without that file")
        elif self.unread:
            said.append(f"without {', '.join(map(str, self.unread))}")
        text = "going on " + (" and ".join(said) or "with the rest of the config")
        if self.unread or "workspace.path" in self.fell_back:
            text += f"; the data is read at {data}"
        return text


def salvage(
    error: ConfigError,
    files: Sequence[tuple[str, Path | None]],
    env: Mapping[str, str],
    flags: Mapping[str, Any] | None = None,
) -> Salvaged:
    """The valid part of the configuration that ``error`` made invalid: the ``files``
    ("user" and "project", with their paths, None for none) read leniently, then the
    environment and ``flags`` over them, as :func:`resolve` layers them."""
    refused: list[ConfigError] = []
    layers: dict[str, ConfigLayer | None] = {}
    unread: list[Path] = []
    for name, path in files:
        if path is None:
            continue
        before = len(refused)
        layers[name] = layer = read_layer(name, path, refused=refused, env=env)
        lost = refused[before:]
        if lost and not (layer and layer.values) and all(e.key is None for e in lost):
            unread.append(path)  # not YAML, not a mapping, not a file: nothing of it kept
    config = resolve(
        project=layers.get("project"),
        user=layers.get("user"),
        env=env,
        flags=flags,
        refused=refused,
    )
    fell_back = sorted({e.key for e in refused if e.key is not None and e.key in schema.BY_KEY})
    return Salvaged(config, error, tuple(fell_back), tuple(unread))
