"""The typed views cover the schema exactly and carry the resolved values."""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from accel.config import schema
from accel.config.resolve import resolve
from accel.config.views import Settings
from accel.workspace import Workspace


def _view_keys() -> set[str]:
    keys = set()
    for section in fields(Settings):
        view = typing.get_type_hints(Settings)[section.name]
        keys |= {f"{section.name}.{f.name}" for f in fields(view)}
    return keys


def test_every_schema_key_has_exactly_one_view_field() -> None:
    assert _view_keys() == {f.key for f in schema.FIELDS}


@pytest.mark.parametrize("field", schema.FIELDS, ids=lambda f: f.key)
def test_each_default_fits_its_annotation(field: schema.Field) -> None:
    section, name = field.key.split(".", 1)
    view = typing.get_type_hints(Settings)[section]
    hint = typing.get_type_hints(view)[name]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    allowed = typing.get_args(hint) if union else (hint,)
    origins = tuple(typing.get_origin(a) or a for a in allowed)
    assert isinstance(field.default, origins), (field.key, field.default, hint)


def test_views_carry_every_layer() -> None:
    env = {"ACCEL_CHECKPOINTS_KEEP_LAST": "7"}
    settings = resolve(project=None, user=None, env=env, flags={"launch.use_cpu": True}).settings
    assert settings.checkpoints.keep_last == 7
    assert settings.launch.use_cpu is True
    assert settings.store.lock_timeout == schema.BY_KEY["store.lock_timeout"].default


def test_workspace_settings_follow_its_config(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / ".accelerate", env={"ACCEL_LOGS_LEVEL": "debug"}).ensure()
    assert ws.settings.logs.level == "debug"
    assert ws.settings.launch.run_name == ws.config["launch.run_name"]
