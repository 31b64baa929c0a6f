"""accel._redact.secret_values: the values the launcher knows to be secret, and the forms
a script writes them in (scrubbed from rank logs, the console and run records)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from accel._redact import redact_argv, scrub, secret_values


def test_hydra_overrides_are_read_by_their_last_dotted_part() -> None:
    argv = ["h.py", "+wandb.api_key=s3cret-one", "++db.password=s3cret-two", "~x.token=s3cret-3"]
    argv += ["--model.hf_token", "s3cret-four", "auth.enabled=true", "+trainer.max_tokens=4096"]
    found = secret_values({}, argv=argv)
    assert set(found) == {"s3cret-one", "s3cret-two", "s3cret-3", "s3cret-four"}
    # `true` would be scrubbed from every log line: auth.enabled names no secret
    assert redact_argv(argv)[1:4] == ["+wandb.api_key=***", "++db.password=***", "~x.token=***"]


@pytest.mark.parametrize(
    "text",
    [
        "https://h/d?token=s3cret-q&part=1",
        "--data-url=https://h/d?part=1&X-Amz-Signature=s3cret-q#frag",
        "get s3://b/k?access%5Ftoken=s3cret-q from the bucket",
    ],
)
def test_secret_query_parameters_of_urls_are_known_secrets(text: str) -> None:
    assert "s3cret-q" in secret_values({"DATA_URL": text})
    assert "s3cret-q" in secret_values({}, argv=["t.py", text])
    assert "1" not in secret_values({}, argv=["t.py", text])


def test_an_escaped_form_of_a_known_secret_is_scrubbed_too() -> None:
    secret = 'pa$s "w\\1 d/é'
    found = secret_values({"DB_PASSWORD": secret})
    for written in (repr(secret), json.dumps(secret), json.dumps(secret, ensure_ascii=False)):
        assert scrub(f"config: {written}", found) in ("config: '***'", 'config: "***"')
    assert scrub(f"url: https://h/?p={quote(secret, safe='')}", found) == "url: https://h/?p=***"


def test_a_plain_secret_adds_no_forms() -> None:
    # each form is one more search per log line: only the forms that differ are kept
    assert secret_values({"HF_TOKEN": "hfplainvalue1"}) == ("hfplainvalue1",)


def test_every_environment_given_adds_its_secrets() -> None:
    found = secret_values({"HF_TOKEN": "from-the-shell"}, {"HF_TOKEN": "from-launch-env"})
    assert set(found) == {"from-the-shell", "from-launch-env"}
