"""accel._redact's word rule both ways: password variables by their common names are
secret; exception class names, ordinary words and accel's own messages never are."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import accel
from accel import errors
from accel._redact import is_secret_name, redact_text

PASSWORD_NAMES = [
    "MYSQL_PWD",
    "DB_PWD",
    "mysqlPwd",
    "LDAP_PASSWD",
    "PASSWD_FILE_CONTENT",
    "REDIS_PASS",
    "SMTP_PASSWORD",
    "PGPASSWORD",
    "CLIENT_SECRET_VALUE",
    "HF_TOKEN",
    "HUGGINGFACE_HUB_TOKEN",
    "STRIPE_KEY",
    "WANDB_API_KEY",
    "OPENAI_API_KEY_2",
    "AZURE_CREDENTIAL",
    "NPM_AUTH",
    "PROXY_AUTH_HEADER",
]


@pytest.mark.parametrize("name", PASSWORD_NAMES)
def test_password_variables_by_their_common_names_are_secret(name: str) -> None:
    assert is_secret_name(name)
    assert redact_text(f"{name}=hunter2-value") == f"{name}=***"


BUILTIN_EXCEPTIONS = sorted(
    n
    for n in dir(builtins)
    if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
)
LIBRARY_EXCEPTIONS = [
    "TokenError",
    "tokenize.TokenError",
    "NoCredentialsError",
    "botocore.exceptions.NoCredentialsError",
    "PartialCredentialsError",
    "InvalidTokenError",
    "ExpiredSignatureError",
    "jwt.exceptions.InvalidSignatureError",
    "AuthenticationError",
    "AuthError",
    "PasswordError",
    "SecretNotFoundError",
    "KeyringError",
    "ApiKeyError",
    "DuplicateKeyError",
    "InvalidKeyException",
    "GatedRepoError",
    "HfHubHTTPError",
    "TokenizerWarning",
]
MESSAGES = [
    "'learning_rate'",
    "bad",
    "Unable to locate credentials",
    "unexpected token at line 3",
    "the key was not found",
    "42",
]


@pytest.mark.parametrize("name", BUILTIN_EXCEPTIONS + LIBRARY_EXCEPTIONS)
def test_exception_names_are_never_secret_names(name: str) -> None:
    assert not is_secret_name(name.rpartition(".")[2])
    for message in MESSAGES:
        line = f"{name}: {message}"
        for text in (line, f"rank 0 failed: {line}", f"Traceback ...\n{line}\n"):
            assert redact_text(text) == text


ORDINARY_TEXT = [
    "KeyError: 'learning_rate'",
    "TokenError: bad",
    "NoCredentialsError: Unable to locate credentials",
    "raise KeyError(key)",
    "except (KeyError, TokenError) as exc:",
    "PWD=/home/me OLDPWD=/tmp",
    "passes=3 bypass=1 tokens=512 keyboard=us author=me",
    "the password was rejected by the server",
    "set a token with `accel config set`",
    "secret handshake failed",
]


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_ordinary_words_are_shown(text: str) -> None:
    assert redact_text(text) == text


def _accel_messages() -> list[str]:
    """Every message accel raises through its own exceptions or prints (string literals
    and f-strings passed to accel.errors' classes, the console's and the log's
    ``error``/``warn``/``info`` and ``notify``), each placeholder filled with a plain
    word."""
    kinds = {n for n in dir(errors) if isinstance(getattr(errors, n), type)}
    kinds |= {"error", "warn", "warning", "info", "notify"}
    found = set()
    for path in Path(accel.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in kinds:
                text = _literal(node.args[0])
                if text and len(text) > 8:
                    found.add(text)
    return sorted(found)


def _literal(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "lr" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left), _literal(node.right)
        return left + right if left is not None and right is not None else None
    return None


ACCEL_MESSAGES = _accel_messages()


def test_accel_raises_enough_messages_to_judge() -> None:
    assert len(ACCEL_MESSAGES) > 200


@pytest.mark.parametrize("message", ACCEL_MESSAGES)
def test_accels_own_messages_are_never_redacted(message: str) -> None:
    assert redact_text(message) == message
