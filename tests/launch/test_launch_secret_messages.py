"""What launch says about a worker's exit message and a bad --env never quotes a secret."""

from __future__ import annotations

import sys

import pytest

from accel.errors import UsageError
from accel.launch import _bootstrap
from accel.launch.request import parse_env_pairs

SECRET = "mysekritABCDEFGHIJKLMNOPQRSTUV"


@pytest.mark.parametrize("before", [470, 480, 490])
def test_an_exit_message_cut_short_keeps_no_start_of_a_secret(
    before: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    message = _bootstrap._exit_message("x" * before + " " + SECRET + " and more")
    assert "mysek" not in message and len(message) <= _bootstrap.MESSAGE_MOST


def test_an_exit_message_is_scrubbed_before_its_spaces_are_joined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DB_PASSWORD", "correct  horse\tbattery")
    monkeypatch.setattr(sys, "argv", ["t.py", "--api-key", "flag-secret-1"])
    said = "login as correct  horse\tbattery with flag-secret-1 refused"
    assert _bootstrap._exit_message(said) == "login as *** with *** refused"


@pytest.mark.parametrize(
    ("pair", "said"),
    [
        ("9HF_TOKEN=mysekrit1", "invalid --env name '9HF_TOKEN' (letters, digits and '_'"),
        ("HF-TOKEN=mysekrit1", "invalid --env name 'HF-TOKEN' (letters, digits and '_'"),
        ("HF_TOKEN", "invalid --env HF_TOKEN, which has no '=': give --env KEY=VALUE"),
        ("mysekrit1 with spaces", "invalid --env: an argument without '=': give --env KEY="),
    ],
)
def test_a_bad_env_flag_names_the_variable_never_the_value(pair: str, said: str) -> None:
    from accel._redact import redact_text

    with pytest.raises(UsageError) as caught:
        parse_env_pairs(["A=1", pair])
    message = str(caught.value)
    assert said in message and "mysekrit" not in message
    assert redact_text(message) == message  # readable as the CLI shows it
