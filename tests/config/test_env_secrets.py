"""launch.env's messages (a file, ACCEL_LAUNCH_ENV, `config set`) never quote a value:
a variable's value may be a secret."""

from __future__ import annotations

import pytest

from accel.config import schema
from accel.config.resolve import env_values
from accel.errors import ConfigError

ENV = schema.BY_KEY["launch.env"]


def test_a_comma_in_a_value_is_said_without_quoting_the_rest() -> None:
    with pytest.raises(ValueError) as caught:
        schema.parse_text(ENV, "A=1,DB_PASSWORD=Hunter,mysekritTail")
    message = str(caught.value)
    assert "mysekrit" not in message and "Hunter" not in message
    assert "part 3 of 3 has no '='" in message and '{"NAME": "a,b"}' in message
    with pytest.raises(ConfigError) as from_env:
        env_values({"ACCEL_LAUNCH_ENV": "DB_PASSWORD=Hunter,mysekritTail"})
    assert "mysekrit" not in str(from_env.value) and "ACCEL_LAUNCH_ENV" in str(from_env.value)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (["mysekrit1"], "a list"),
        ({"k": "mysekrit1"}, "a mapping"),
        (True, "a boolean"),
        (float("inf"), "a number that is not finite"),
    ],
)
def test_a_value_of_the_wrong_type_is_said_by_its_type(value: object, kind: str) -> None:
    with pytest.raises(ValueError) as caught:
        schema.coerce(ENV, {"HF_TOKEN": value})
    assert str(caught.value) == f"value of HF_TOKEN must be a string, got {kind}"


def test_launch_env_that_is_not_a_mapping_is_said_by_its_type() -> None:
    with pytest.raises(ValueError) as caught:
        schema.coerce(ENV, "HF_TOKEN=mysekrit1")
    assert "mysekrit" not in str(caught.value) and str(caught.value).endswith("got a string")


@pytest.mark.parametrize(
    "text", ["A=1,TOKEN=hunter2,TOKEN=hunter3", '{"A": "1", "TOKEN": "hunter2", "TOKEN": "x"}']
)
def test_a_variable_given_twice_is_refused_naming_it_not_its_values(text: str) -> None:
    """The last one silently won: `A=1,A=2` is a slip more often than a wish."""
    with pytest.raises(ValueError) as caught:
        schema.parse_text(ENV, text)
    assert str(caught.value) == "TOKEN is given twice; give each variable once"
    with pytest.raises(ConfigError, match="ACCEL_LAUNCH_ENV.*TOKEN is given twice"):
        env_values({"ACCEL_LAUNCH_ENV": text})
