"""accel._redact hides what is secret and only that: a URL's username, an error message
about a password field or a token, are not credentials; a password, a token as a URL's
user and a credential assignment still are (issue 22's audit)."""

from __future__ import annotations

import pytest

from accel._redact import redact_mapping, redact_text, redact_url, scrub, secret_values

# -- URLs: the password part of the userinfo is secret, a username alone is not -----------

USERNAME_URLS = [
    "sftp://ubuntu@host/x",
    "ssh://admin@h",
    "ssh://git@github.com/org/repo.git",
    "git+ssh://git@github.com:org/repo.git",
    "sftp://ec2-user@10.0.0.5:22/data",
    "https://me%40corp.com@host/x",
    "http://proxyuser@proxy.example:3128",
    "git@github.com:org/repo.git",
]


@pytest.mark.parametrize("url", USERNAME_URLS)
def test_a_username_alone_is_shown_and_never_scrubbed(url: str) -> None:
    assert redact_text(url) == url
    assert redact_url(url) == url
    assert redact_text(f"cannot reach {url}: refused") == f"cannot reach {url}: refused"
    found = secret_values({"REMOTE": url}, argv=["train.py", "--remote", url])
    assert found == ()
    line = "rank 0: saved to /home/ubuntu/admin/ec2-user/proxyuser/runs, user git"
    assert scrub(line, found) == line


def test_a_username_beside_a_password_is_not_a_secret_value() -> None:
    found = secret_values({"STORE": "sftp://ubuntu:pw-long-1234@host/x"})
    assert found == ("pw-long-1234",)
    assert scrub("/home/ubuntu/x pw-long-1234", found) == "/home/ubuntu/x ***"


# (URL, its secret): a token in the place of the user, and passwords, stay hidden.
TOKEN_URLS = [
    ("https://userTok9999@git.example/r.git", "userTok9999"),
    ("https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/1", "0123456789abcdef"),
    ("https://ghp_abcdefghijklmnopqrstuv0123@github.com/o/r", "ghp_abcdef"),
    ("redis://:pw@cache:6379/0", ":pw@"),
    ("redis://:pw-empty-user@cache:6379/0", "pw-empty-user"),
    ("https://ubuntu:hunter2@host/x", "hunter2"),
]


@pytest.mark.parametrize(("url", "secret"), TOKEN_URLS)
def test_a_token_as_the_user_and_a_password_are_still_hidden(url: str, secret: str) -> None:
    assert secret not in redact_text(f"cannot reach {url}")
    assert secret not in redact_url(url)
    assert "***@" in redact_url(url)


def test_a_token_as_the_user_is_a_secret_value() -> None:
    found = secret_values({"GIT_URL": "https://userTok9999@git.example/r.git"})
    assert found == ("userTok9999",)


# -- NAME: value -----------------------------------------------------------------------------

# Error messages about a password field or a token: prose, shown as they are.
PROSE = [
    "invalid token: line 3",
    "password: expected a string",
    "ValueError: password: expected a string",
    "SyntaxError: invalid token: line 3, column 7",
    "error: invalid token: expected a string at line 3",
    "secret: not set, see the docs",
    "auth token: missing from the request",
    "config error at password: must be at least 8 characters",
    "Password: expected a string",
    "  token: see `accel config set`",
    "invalid token: expired",
    "password: required, see the docs",
    "user bob, password: expected a string",
    "KEY: launch.env",
]


@pytest.mark.parametrize("text", PROSE)
def test_prose_after_a_credential_word_is_shown(text: str) -> None:
    assert redact_text(text) == text


# (text, the secret, what must stay): the forms that assign a credential.
ASSIGNMENTS = [
    ("password: hunter2", "hunter2", "password: ***"),  # a YAML line
    ("db:\n  password: hunter2  # prod\n  host: h", "hunter2", "# prod\n  host: h"),
    ("- token: abc\n- other: x", "abc", "- token: ***\n- other: x"),
    ("password: 'correct horse battery'", "correct horse", "password: '***'"),
    ("X-Api-Key: abc123", "abc123", "X-Api-Key: ***"),  # a header line
    ("password: hunter2\r\nnext", "hunter2", "password: ***\r\nnext"),
    ("token: expired", "expired", "token: ***"),  # alone on its line: read as YAML
    ("launch: {env: {my_token: abc, a: b}}", "abc", "{my_token: ***, a: b}"),  # flow style
    ("{a: b, password: hunter2}", "hunter2", "{a: b, password: ***}"),
    ("HF_TOKEN: hf-yaml-1 rest", "hf-yaml-1", "HF_TOKEN: *** rest"),  # an env-var name
    ("login failed, password: Xk9mPq2wZr", "Xk9mPq2wZr", "login failed, password: ***"),
    ("token: 0123456789abcdef0123 was refused", "0123456789abcdef", "was refused"),
    ('{"password": "expected a string"}', "expected a string", '{"password": "***"}'),
    ("{'api_key': 'k-1'}", "k-1", "{'api_key': '***'}"),
    ("password=expected", "expected", "password=***"),
    ("HF_TOKEN=line", "line", "HF_TOKEN=***"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), ASSIGNMENTS)
def test_credential_assignments_are_hidden(text: str, secret: str, kept: str) -> None:
    shown = redact_text(text)
    assert secret not in shown and kept in shown, shown
    assert redact_text(shown) == shown


def test_a_config_value_is_shown_unless_it_is_secret() -> None:
    config = {"remote": "sftp://ubuntu@host/x", "env": {"GIT_URL": "https://userTok9999@g/r"}}
    assert redact_mapping(config) == {
        "remote": "sftp://ubuntu@host/x",
        "env": {"GIT_URL": "https://***@g/r"},
    }


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    [
        " token: a" * 50_000,
        "\n - token: a #" * 50_000,
        "{token: a," * 50_000,
        "token: " * 50_000,
        "\n" + " " * 100_000 + "x",
        "{" + " " * 100_000 + "x",
    ],
)
def test_the_prose_rule_reads_hostile_text_in_linear_time(text: str) -> None:
    assert redact_text(text)
