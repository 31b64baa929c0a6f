"""accel._redact right both ways: URL credentials in every RFC 3986 form are hidden, in a
URL and inside free text; ordinary text around them (and without them) is left alone."""

from __future__ import annotations

import pytest

from accel._redact import (
    redact_argv,
    redact_mapping,
    redact_text,
    redact_url,
    scrub,
    secret_values,
)
from accel.workspace import Workspace

# (URL, its secret, what must stay): every form RFC 3986 allows in the userinfo.
URL_FORMS = [
    ("redis://:pw-empty-user@cache:6379/0", "pw-empty-user", "redis://***@cache:6379/0"),
    ("https://tokUserOnly42@host/x", "tokUserOnly42", "https://***@host/x"),  # a token as user
    ("https://u:a!$&'()*+,;=b@host/x", "a!$&'()*+,;=b", "https://***@host/x"),
    ("postgres://bob:it's-mine@db:5432/app", "it's-mine", "postgres://***@db:5432/app"),
    ("https://u:p%40ss%2Fw0rd@host/x", "p%40ss%2Fw0rd", "https://***@host/x"),
    ("https://me%40corp.com:pw-enc-user@host/x", "pw-enc-user", "https://***@host/x"),
    ("https://u:pw-idn-host@bücher.example/x", "pw-idn-host", "https://***@bücher.example/x"),
    ("https://u:pw-puny@xn--bcher-kva.example", "pw-puny", "https://***@xn--bcher-kva.example"),
    ("https://u:pw-ipv6@[2001:db8::1]:8443/x", "pw-ipv6", "https://***@[2001:db8::1]:8443/x"),
    ("mongodb://u:pw-multi@h1,h2/db", "pw-multi", "mongodb://***@h1,h2/db"),
    # no host (a typo; sync refused it naming the URL, password and all)
    ("https://alice:pw-no-host@/team/run", "pw-no-host", "https://***@/team/run"),
    ("https://alice:pw-port-only@:8443/x", "pw-port-only", "https://***@:8443/x"),
    ("ftp://alice:pw-bare@", "pw-bare", "ftp://***@"),
]


@pytest.mark.parametrize(("url", "secret", "kept"), URL_FORMS)
def test_url_credentials_in_every_form_are_hidden(url: str, secret: str, kept: str) -> None:
    assert redact_url(url) == kept
    for text in (
        f"ConnectionError: cannot reach {url}: refused",
        f"'{url}'",
        f'"{url}"',
        f"(see {url})",
        f"url={url}",
    ):
        shown = redact_text(text)
        assert secret not in shown, text
        assert kept in shown, text
    assert redact_argv(["train.py", "--store", url]) == ["train.py", "--store", kept]


@pytest.mark.parametrize(("url", "secret", "kept"), URL_FORMS)
def test_url_credentials_are_secret_values_to_scrub(url: str, secret: str, kept: str) -> None:
    found = secret_values({"STORE": url})
    assert scrub(f"worker printed {secret} raw", found) == "worker printed *** raw"


# URLs with an '@' or a ':' that are not credentials: shown as they are.
NOT_CREDENTIALS = [
    "https://host:8080/p?mail=a@b.example",
    "https://registry.example/@scope/pkg",
    "ssh git@github.com:org/repo.git",
    "see https://github.com/a/b, then retry",
    "http://[::1]:8000/health",
    "mailto:bob@example.com",
]


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_urls_without_credentials_are_unchanged(text: str) -> None:
    assert redact_text(text) == text
    assert redact_url(text) == text


# -- values the launcher knows -------------------------------------------------------------


def test_secret_flags_of_a_command_line_are_secret_values() -> None:
    argv = ["train.py", "--hf-token", "tok-14", "--password=pw-15", "--api-key", "key-16"]
    argv += ["--lr", "0.1234", "--store", "https://:url-17@s.example/b", "NAME_TOKEN=tok-18"]
    found = secret_values({}, argv=argv)
    assert set(found) == {"tok-14", "pw-15", "key-16", "url-17", "tok-18"}
    line = "args: Namespace(hf_token='tok-14', lr=0.1234) failed with pw-15/key-16"
    assert scrub(line, found) == "args: Namespace(hf_token='***', lr=0.1234) failed with ***/***"


def test_a_mapping_is_scrubbed_of_known_values_wherever_they_are() -> None:
    record = {"error": {"message": "cannot log in as tok-14", "n": 3}, "tail": ["x tok-14"]}
    assert redact_mapping(record, ("tok-14",)) == {
        "error": {"message": "cannot log in as ***", "n": 3},
        "tail": ["x ***"],
    }
    assert redact_mapping(record) == record  # without known values, plain text stays


def test_a_failure_is_scrubbed_in_its_message_and_traceback() -> None:
    from accel.runs.failures import RankFailure

    failure = RankFailure(0, 0, 1, 1, 0, 0.0, "RuntimeError", "bad tok-14", "raise tok-14")
    shown = failure.scrubbed(("tok-14",))
    assert (shown.message, shown.traceback, shown.type) == ("bad ***", "raise ***", "RuntimeError")


def test_a_crash_log_is_scrubbed_of_the_secrets_of_its_environment_and_argv() -> None:
    from accel.crashlog import crash_text

    argv = ["accel", "sync", "push", "--token", "tok-14"]
    trace = "Traceback ...\nValueError: cannot use tok-14 or hunter22-pw\n"
    text = crash_text("1.0", argv, trace, {"MYSQL_PWD": "hunter22-pw", "HOME": "/home/me"})
    assert "tok-14" not in text and "hunter22-pw" not in text
    assert "ValueError: cannot use *** or ***" in text


def test_a_crash_log_scrubs_a_secret_with_a_space_and_the_launch_envs() -> None:
    # it redacted first, which hid 'PASSWORD=correct' and left ' horse battery' of the
    # secret; and the variables of ACCEL_LAUNCH_ENV were no known secrets there
    from accel.crashlog import crash_text

    env = {"DB_PASSWORD": "correct horse battery", "ACCEL_LAUNCH_ENV": "HF_TOKEN=hf_launch_42"}
    trace = "ValueError: DB_PASSWORD=correct horse battery, and hf_launch_42 refused\n"
    text = crash_text("1.0", ["accel", "status"], trace, env)
    assert "horse" not in text and "battery" not in text and "hf_launch_42" not in text, text


# -- hostile text ---------------------------------------------------------------------------

HOSTILE = {
    "secret names": "HF_TOKEN=" * 50_000,
    "placeholders": "HF_TOKEN=<" * 50_000,
    "pairs": "a=b:" * 100_000,
    "schemes without an @": "x://a:" * 50_000 + "@",
    "a dotted word before an @": "a." * 100_000 + "@h ://",
    "flags": "--token=" * 50_000,
}


@pytest.mark.timeout(30)  # each takes well under a second; a quadratic scan takes minutes
@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_redaction_reads_hostile_text_in_linear_time(text: str) -> None:
    """A worker's message or a pulled record is redacted in one pass: each character is
    read a bounded number of times, whatever it holds."""
    assert redact_text(text)
    assert secret_values({"X": text, "HF_TOKEN": text}) is not None


def test_an_error_line_is_scrubbed_of_the_secret_values_it_quotes(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel.cli.main import main

    monkeypatch.setenv("MY_SERVICE_TOKEN", "zz-secret-zz")
    assert main(["config", "set", "launch.num_processes", "zz-secret-zz"]) == 2
    err = capsys.readouterr().err
    assert "launch.num_processes" in err and "***" in err
    assert "zz-secret-zz" not in err
