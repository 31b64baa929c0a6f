"""FSDP settings: the config keys, Hugging Face's variables, and the launcher's export."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from accel.config import schema
from accel.config.fsdp import FsdpSettings, resolve, worker_env
from accel.config.resolve import resolve as resolve_config
from accel.config.views import LaunchSettings, Settings
from accel.errors import UsageError

DEFAULTS = Settings.of(schema.defaults()).launch


def config(**values: Any) -> LaunchSettings:
    return Settings.of(
        {**schema.defaults(), **{f"launch.{k}": v for k, v in values.items()}}
    ).launch


def test_off_unless_asked() -> None:
    assert resolve(None, {}, DEFAULTS) is None
    assert resolve(True, {}, DEFAULTS) == FsdpSettings()


@pytest.mark.parametrize(
    ("argument", "env", "project", "on"),
    [
        (None, {}, True, True),
        (None, {"ACCELERATE_USE_FSDP": "true"}, False, True),
        (None, {"ACCELERATE_USE_FSDP": "false"}, True, False),  # the launcher's --no-fsdp
        (None, {"ACCELERATE_USE_FSDP": "1"}, False, True),
        (False, {"ACCELERATE_USE_FSDP": "true"}, True, False),  # the argument wins
        (True, {"ACCELERATE_USE_FSDP": "false"}, False, True),
    ],
)
def test_argument_then_accelerate_use_fsdp_then_config(
    argument: bool | None, env: dict[str, str], project: bool, on: bool
) -> None:
    assert (resolve(argument, env, config(fsdp=project)) is not None) is on


def test_each_fsdp_variable_wins_over_its_key() -> None:
    project = config(
        fsdp=True,
        fsdp_wrap="none",
        fsdp_layer_classes=["A"],
        fsdp_min_params=5,
        fsdp_reshard_after_forward=True,
    )
    assert resolve(None, {}, project) == FsdpSettings("none", ("A",), 5, True)
    env = {
        "FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP",
        "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block,Layer",
        "FSDP_MIN_NUM_PARAMS": "1000",
        "FSDP_RESHARD_AFTER_FORWARD": "false",
    }
    assert resolve(None, env, project) == FsdpSettings("size", ("Block", "Layer"), 1000, False)
    accels_spelling = resolve(None, {"FSDP_AUTO_WRAP_POLICY": "transformer"}, project)
    assert accels_spelling is not None and accels_spelling.wrap == "transformer"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"ACCELERATE_USE_FSDP": "maybe"}, "ACCELERATE_USE_FSDP='maybe' is not true or false"),
        ({"FSDP_VERSION": "1"}, "FSDP_VERSION=1: accel shards with FSDP2 (fully_shard) only"),
        ({"FSDP_AUTO_WRAP_POLICY": "LAMBDA"}, "FSDP_AUTO_WRAP_POLICY: expected one of"),
        ({"FSDP_TRANSFORMER_CLS_TO_WRAP": "a.b"}, "FSDP_TRANSFORMER_CLS_TO_WRAP: expected"),
        ({"FSDP_MIN_NUM_PARAMS": "1e8"}, "FSDP_MIN_NUM_PARAMS: expected an integer"),
        ({"FSDP_RESHARD_AFTER_FORWARD": "FULL_SHARD"}, "FSDP_RESHARD_AFTER_FORWARD: expected"),
    ],
)
def test_a_bad_variable_is_named(env: dict[str, str], words: str) -> None:
    with pytest.raises(UsageError) as caught:
        resolve(None, {"ACCELERATE_USE_FSDP": "true", **env}, DEFAULTS)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_fsdp_version_matters_only_when_fsdp_is_on() -> None:
    assert resolve(None, {"FSDP_VERSION": "1"}, DEFAULTS) is None
    assert resolve(None, {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, DEFAULTS)


@pytest.mark.parametrize(
    "values",
    [
        {"fsdp": True},
        {"fsdp": True, "fsdp_wrap": "size", "fsdp_min_params": 0},
        {"fsdp": True, "fsdp_wrap": "none", "fsdp_reshard_after_forward": False},
        {"fsdp": True, "fsdp_layer_classes": ["Block", "Head"]},
    ],
)
def test_workers_read_back_what_the_launcher_exports(values: dict[str, Any]) -> None:
    """The worker's Accelerator reads the project file without the launch's flags: the
    variables alone must carry every setting."""
    launched = config(**values)
    assert resolve(None, worker_env(launched), DEFAULTS) == resolve(None, {}, launched)


def test_the_launcher_always_says_whether() -> None:
    assert worker_env(DEFAULTS) == {"ACCELERATE_USE_FSDP": "false"}
    assert worker_env(config(fsdp=True))["ACCELERATE_USE_FSDP"] == "true"


def test_the_env_twins_of_the_keys() -> None:
    env = {"ACCEL_LAUNCH_FSDP": "yes", "ACCEL_LAUNCH_FSDP_LAYER_CLASSES": "Block,Head"}
    resolved = resolve_config(project=None, user=None, env=env)
    assert resolve(None, {}, resolved.settings.launch) == FsdpSettings(
        layer_classes=("Block", "Head")
    )


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_settings_import_no_torch() -> None:
    import subprocess

    code = (
        "import sys, accel.config.fsdp, accel.config.hf_fsdp\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
