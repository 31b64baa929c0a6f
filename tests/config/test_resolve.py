from __future__ import annotations

from pathlib import Path

import pytest

from accel.config.resolve import read_layer, resolve, user_config_path
from accel.errors import ConfigError, UsageError
from accel.workspace import Workspace


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def layers(tmp_path: Path):  # type: ignore[no-untyped-def]
    user = read_layer(
        "user",
        write(
            tmp_path / "u.yaml", "launch:\n  num_processes: 2\n  max_restarts: 1\n  use_cpu: true\n"
        ),
    )
    project = read_layer(
        "project", write(tmp_path / "p.yaml", "launch:\n  num_processes: 3\n  max_restarts: 4\n")
    )
    return project, user


def test_each_layer_overrides_the_one_below(layers) -> None:  # type: ignore[no-untyped-def]
    project, user = layers
    env = {"ACCEL_LAUNCH_NUM_PROCESSES": "5", "ACCEL_LAUNCH_MAX_RESTARTS": "6"}
    cfg = resolve(project=project, user=user, env=env, flags={"launch.num_processes": 7})
    assert cfg["launch.num_processes"] == 7
    assert cfg.origins["launch.num_processes"].layer == "flag"
    assert cfg["launch.max_restarts"] == 6
    assert str(cfg.origins["launch.max_restarts"]) == "env (ACCEL_LAUNCH_MAX_RESTARTS)"
    cfg = resolve(project=project, user=user, env={})
    assert cfg["launch.num_processes"] == 3
    assert cfg.origins["launch.num_processes"].layer == "project"
    assert cfg.origins["launch.num_processes"].line == 2
    assert cfg["launch.use_cpu"] is True
    assert cfg.origins["launch.use_cpu"].layer == "user"
    assert cfg["launch.mixed_precision"] == "no"
    assert cfg.origins["launch.mixed_precision"].layer == "default"


def test_flags_given_as_none_do_not_override(layers) -> None:  # type: ignore[no-untyped-def]
    project, user = layers
    cfg = resolve(project=project, user=user, env={}, flags={"launch.num_processes": None})
    assert cfg["launch.num_processes"] == 3


def test_bad_env_twin_names_the_variable() -> None:
    with pytest.raises(
        ConfigError, match="environment variable ACCEL_LAUNCH_NUM_PROCESSES: expected"
    ):
        resolve(project=None, user=None, env={"ACCEL_LAUNCH_NUM_PROCESSES": "many"})


def test_bad_flag_names_the_flag() -> None:
    with pytest.raises(UsageError, match="invalid value for --mixed-precision: expected one of"):
        resolve(project=None, user=None, env={}, flags={"launch.mixed_precision": "fp64"})


def test_user_file_lives_in_the_platform_config_dir(tmp_path: Path) -> None:
    assert user_config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/accel/config.yaml")
    assert user_config_path({"HOME": "/h"}) == Path("/h/.config/accel/config.yaml")
    assert user_config_path({}) is None


def test_workspace_config_reads_user_and_project_files(project: Path) -> None:
    import os

    write(Path(os.environ["XDG_CONFIG_HOME"]) / "accel" / "config.yaml", "logs:\n  level: debug\n")
    ws = Workspace.discover().ensure()
    write(ws.config_file, "logs:\n  backup_count: 9\n")
    cfg = Workspace.discover().config
    assert (cfg["logs.level"], cfg["logs.backup_count"]) == ("debug", 9)
    assert cfg.origins["logs.level"].layer == "user"


def test_a_config_path_that_is_no_file_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "config.yaml"
    folder.mkdir()
    said = {
        "project": "move it away; `accel config --default` writes a new one",
        "user": "move it away (the user config is a YAML file)",
        "file": "give a YAML file",
    }
    monkeypatch.delenv("ACCEL_USER_CONFIG", raising=False)
    for layer, fix in said.items():
        with pytest.raises(ConfigError) as caught:
            read_layer(layer, folder)
        assert str(caught.value) == f"{folder}: not a regular file; {fix}"
    monkeypatch.setenv("ACCEL_USER_CONFIG", str(folder))  # the path the user gave
    with pytest.raises(ConfigError, match="point ACCEL_USER_CONFIG at a YAML file, or unset it"):
        read_layer("user", folder)
    # the environment the path was found in decides, not this process's
    with pytest.raises(ConfigError, match=r"move it away \(the user config is a YAML file\)"):
        read_layer("user", folder, env={})


def test_missing_home_is_fine(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOME")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert Workspace.discover().config["launch.num_processes"] == 1
