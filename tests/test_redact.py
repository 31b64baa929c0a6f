"""accel._redact against a corpus of realistic secrets (and of things that only look like
them): every secret hidden, every ordinary value shown as it is."""

from __future__ import annotations

import pytest

from accel._redact import (
    REDACTED,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_mapping,
    redact_text,
    redact_url,
    redact_value,
    scrub,
    secret_values,
)

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# -- names -------------------------------------------------------------------------------

SECRET_NAMES = [
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "GITHUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "WANDB_API_KEY",
    "OPENAI_API_KEY",
    "DB_PASSWORD",
    "PGPASSWORD",
    "MYSQL_PWD_PASSWD",
    "DB_PASS",
    "SMTP_PASSPHRASE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "MY_CREDS",
    "AUTH",
    "BASIC_AUTH",
    "OAUTH_CLIENT",
    "AUTHORIZATION",
    "AUTHTOKEN",
    "ACCELERATE_SECRET_THING",
    "clientSecret",
    "accessToken",
    "apiKey",
    "api-key",
    "x-api-key",
    "KEY",
    "SSH_PRIVATE_KEY",
    "SENTRY_DSN",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "sig",
    "SESSION_COOKIE",
]
ORDINARY_NAMES = [
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_DEBUG",
    "MONKEY_BUSINESS",
    "KEYBOARD",
    "TOKENIZERS_PARALLELISM",
    "MAX_NEW_TOKENS",
    "NUM_TOKENS",
    "AUTHOR",
    "AUTHORS",
    "CERT_AUTHORITY",
    "NUM_PASSES",
    "BYPASS_CACHE",
    "COMPASS_DIR",
    "PASSAGE_LEN",
    "PWD",
    "OLDPWD",
    "PATH",
    "SSH_KEY_PATH",
    "AWS_ACCESS_KEY_ID",
    "KEYS",
    "MASTER_ADDR",
    "PYTHONPATH",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)
    assert redact_value(name, "s3cr3t-value") == REDACTED


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_are_shown(name: str) -> None:
    assert not is_secret_name(name)
    assert redact_value(name, "4") == "4"


# -- free text ----------------------------------------------------------------------------

# (text, the secret that must be gone, a part that must stay)
TEXT_CORPUS = [
    ("https://bob:pw123@host/x", "pw123", "https://***@host/x"),
    (f"s3://AKIAIOSFODNN7EXAMPLE:{AWS_SECRET}@bucket/p", AWS_SECRET, "s3://***@bucket/p"),
    ("https://u:p@ss/w@rd@host.example:8443/x", "ss/w@rd", "***@host.example:8443/x"),
    ("postgres://admin:a:b:c@db.internal:5432/prod", "a:b:c", "postgres://***@db.internal"),
    ("pip install --index-url https://tokIdx123abc@pypi.example/simple", "tokIdx", "pypi.example"),
    ("git clone https://ghp_abcdefghijklmnopqrstuv0123@github.com/o/r", "ghp_abc", "github.com"),
    ("HF_TOKEN=abc and OTHER=1", "abc", "OTHER=1"),
    ("export WANDB_API_KEY='quoted key value'", "quoted key value", "WANDB_API_KEY='***'"),
    ("--token abc --name run", "abc", "--name run"),
    ("python train.py --lr 0.1 --api-key ak-99 --epochs 3", "ak-99", "--epochs 3"),
    ("python train.py --verbose --password hunter2", "hunter2", "--verbose --password ***"),
    ("train.py --api-key=-leading-dash", "-leading-dash", "--api-key=***"),
    ("accel launch --env HF_TOKEN=hf_xyz train.py", "hf_xyz", "train.py"),
    ('{"WANDB_API_KEY": "zz9", "A": "b"}', "zz9", '"A": "b"'),
    ("launch:\n  env:\n    HF_TOKEN: hf_yaml_value\n    A: b", "hf_yaml_value", "A: b"),
    ("password: hunter2", "hunter2", "password: ***"),
    ("Authorization: Bearer abcdefghijkl", "abcdefghijkl", "Bearer ***"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "Basic ***"),
    ("got hf_abcdefghijklmnopqrstuvwxyz in a message", "hf_abc", "in a message"),
    ("key sk-proj-abcdefghijklmnopqrstuvwx leaked", "sk-proj-abc", "leaked"),
    ("slack xoxb-1234567890-abcdef", "xoxb-1234567890", "slack"),
    ("ASIAIOSFODNN7EXAMPLE is a temporary key id", "ASIAIOSFODNN7EXAMPLE", "temporary"),
    ("https://host/p?X-Amz-Signature=abc123&part=1", "abc123", "part=1"),
    ("https://host/p?X-Amz-Security-Token=FwoGZX&X-Amz-Expires=60", "FwoGZX", "Expires=60"),
    ("OTHER=HF_TOKEN=nested", "nested", "OTHER=HF_TOKEN=***"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig_part-xyz", "eyJhbGci", "jwt"),
    ("AccountName=acct;AccountKey=abc/def+==;EndpointSuffix=core", "abc/def+==", "acct"),
]
# Text that only looks like it holds a secret: shown unchanged.
HARMLESS_TEXT = [
    "unknown key 'launch.foo' at line 3",
    "Basic training setup finished",
    "TOKENIZERS_PARALLELISM=false MAX_NEW_TOKENS=5 AUTHOR=me NUM_PASSES=3",
    "npm install https://registry.example/@scope/pkg",
    "auth: failed for user bob",
    "the key: launch.env must be a mapping",
    "http://localhost:8000/api?page=2&sort=asc",
    "ssh git@github.com:org/repo.git",
    "rank 0 failed: RuntimeError: CUDA out of memory",
    "invalid --storage-option 'oops': expected KEY=VALUE",
    "usage: accel launch --env KEY=VALUE [--token <token>]",
]


@pytest.mark.parametrize(("text", "secret", "kept"), TEXT_CORPUS)
def test_text_secrets_are_hidden(text: str, secret: str, kept: str) -> None:
    shown = redact_text(text)
    assert secret not in shown
    assert kept in shown
    assert redact_text(shown) == shown  # idempotent: redacting twice changes nothing


@pytest.mark.parametrize("text", HARMLESS_TEXT)
def test_harmless_text_is_unchanged(text: str) -> None:
    assert redact_text(text) == text


# -- command lines ------------------------------------------------------------------------

ARGV_CORPUS = [
    (
        ["accel", "launch", "--env", "HF_TOKEN=abc", "train.py"],
        ["accel", "launch", "--env", "HF_TOKEN=***", "train.py"],
    ),
    (
        ["train.py", "--data", "x", "--api-key", "k1", "--lr", "1"],
        ["train.py", "--data", "x", "--api-key", "***", "--lr", "1"],
    ),
    (["train.py", "--password=p/w@x"], ["train.py", "--password=***"]),
    (["train.py", "--token", "--verbose"], ["train.py", "--token", "--verbose"]),
    (
        ["train.py", "--hub-url", "https://u:pw@h/x"],
        ["train.py", "--hub-url", "https://***@h/x"],
    ),
    (["train.py", "--secret-file", "/etc/s"], ["train.py", "--secret-file", "***"]),
    (["train.py", "--max-new-tokens", "64"], ["train.py", "--max-new-tokens", "64"]),
]


@pytest.mark.parametrize(("argv", "shown"), ARGV_CORPUS)
def test_argv(argv: list[str], shown: list[str]) -> None:
    assert redact_argv(argv) == shown


# -- mappings, environments, URLs ---------------------------------------------------------


def test_mapping_hides_values_under_secret_keys_at_any_depth() -> None:
    config = {
        "launch": {
            "env": {"MY_TOKEN": "t", "A": "b", "PORT_PASS": 1234, "DSN": "https://k@s.io/1"},
            "num_processes": 2,
            "use_cpu": True,
        },
        "credentials": {"user": "bob", "extra": ["x", {"k": "v"}]},
        "command": ["train.py", "--api-key", "abc"],
    }
    assert redact_mapping(config) == {
        "launch": {
            "env": {"MY_TOKEN": REDACTED, "A": "b", "PORT_PASS": REDACTED, "DSN": REDACTED},
            "num_processes": 2,
            "use_cpu": True,
        },
        "credentials": {"user": REDACTED, "extra": [REDACTED, {"k": REDACTED}]},
        "command": ["train.py", "--api-key", REDACTED],
    }


def test_environment_keeps_names_and_hides_values() -> None:
    env = {"HF_TOKEN": "x1", "PIP_INDEX_URL": "https://u:p4ss@idx/simple", "OMP_NUM_THREADS": "4"}
    assert redact_env(env) == {
        "HF_TOKEN": REDACTED,
        "PIP_INDEX_URL": "https://***@idx/simple",
        "OMP_NUM_THREADS": "4",
    }


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("s3://AKIA:s3cr3t@bucket/p", "s3://***@bucket/p"),
        ("https://host/p?X-Amz-Signature=abc&part=1", "https://host/p?X-Amz-Signature=***&part=1"),
        ("https://host/p?access%5Ftoken=abc", "https://host/p?access%5Ftoken=***"),
        ("file:///tmp/r", "file:///tmp/r"),
    ],
)
def test_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_secret_values_scrub_what_a_worker_prints() -> None:
    env = {
        "HF_TOKEN": "hf_plain_value_1",
        "DATABASE_URL": f"postgres://app:{AWS_SECRET}@db/x",
        "SHORT_TOKEN": "ab",  # too short to scrub without garbling every log line
        "PATH": "/usr/bin",
    }
    found = secret_values(env)
    assert "hf_plain_value_1" in found and AWS_SECRET in found
    assert "ab" not in found and "/usr/bin" not in found
    line = f"token is hf_plain_value_1 and db secret {AWS_SECRET}; path /usr/bin"
    assert scrub(line, found) == "token is *** and db secret ***; path /usr/bin"


def test_the_module_is_ground_floor() -> None:
    """accel._redact imports nothing of accel: every layer may use it."""
    import ast
    from pathlib import Path

    import accel._redact as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in (n.names if isinstance(n, ast.Import) else [n])
    ]
    assert not [name for name in imported if name and name.startswith("accel")]


def test_a_mapping_nested_deeper_than_python_recurses_is_redacted_not_a_crash() -> None:
    deep: object = "leaf"
    for _ in range(5000):
        deep = [deep, "x"]
    shown = redact_mapping({"cwd": deep, "HF_TOKEN": "t"})
    assert shown["HF_TOKEN"] == REDACTED and isinstance(shown["cwd"], list)
