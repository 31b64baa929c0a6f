"""Redaction: the one place that decides what a secret looks like and hides it.

Ground floor: imports nothing of accel. Everything accel writes, shows or uploads that
may carry a value from the user (run records, views, logs, crash logs, sync uploads)
passes through here; the workers still get the real values.

What counts as a secret
-----------------------
A *name* (a variable, a flag, a key, a query parameter) is split into words at ``_``,
``-``, ``.``, spaces and camelCase humps. It is secret when one word

- contains ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE`` or ``CREDENTIAL``;
- ends with ``TOKEN`` (``HF_TOKEN``, ``accessToken``) - not ``TOKENS``/``TOKENIZER``,
  which are counts and models (``MAX_NEW_TOKENS``, ``TOKENIZERS_PARALLELISM``);
- is ``PASS`` (``DB_PASS``) - not ``PASSES``, ``BYPASS``, ``COMPASS``;
- is ``AUTH``/``OAUTH``/``AUTHORIZATION`` or starts with ``AUTH`` - not ``AUTHOR(S)``,
  ``AUTHORITY``;
- is ``KEY`` or a known ``*KEY`` (``APIKEY``, ``ACCESSKEY``, ``PRIVATEKEY``, ...) unless
  the next word says it names where a key is (``KEY_PATH``, ``KEY_FILE``, ``KEY_ID``):
  ``MONKEY``, ``KEYBOARD`` and ``KEYS`` are not keys;
- is ``CREDS``, ``COOKIE``, ``SIGNATURE``, ``SIG`` or ``DSN``;
- is ``PWD`` after another word (``MYSQL_PWD``) - ``PWD`` alone is the working directory.

A name whose last word is ``Error``, ``Errors``, ``Exception``, ``Warning`` or ``Failure``
names a kind of failure, never a secret: ``KeyError: 'lr'``, ``TokenError: bad`` and
``NoCredentialsError: Unable to locate credentials`` are shown as they are.

A *value* is hidden whole under a secret name: always in ``NAME=value``,
``"name": value``, ``--name value`` and ``--name=value``; in ``name: value``, which
prose writes too (``invalid token: line 3``), only when the name is upper case
(``HF_TOKEN: x``), the pair is a YAML or header line whole or a flow mapping's item
(``password: hunter2``, ``{password: x}``), or the value looks like a token: 8 or more
of ``A-Za-z0-9._~+/=-`` with a digit, and both cases or 16 characters or more. Hidden
wherever they appear: the userinfo of a URL with a password, in every RFC 3986 form, or
with a user alone that looks like a token (``https://<token>@host``; a username is no
secret), ``Bearer``/``Basic`` values, and well-known token formats (``hf_``, ``ghp_``,
``sk-``, ``AKIA``, ``xox*-``, JWTs). The values the launcher knows to be secret
(:func:`secret_values`: of secret variables, flags and Hydra overrides, URL passwords
and secret query parameters, each also as ``repr()``, JSON and percent-encoding write
it) are scrubbed wherever they appear (:func:`scrub`, ``redact_mapping(..., secrets)``).
The rule with its examples: docs/guarantees.md.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

__all__ = [
    "REDACTED",
    "is_secret_name",
    "redact_argv",
    "redact_env",
    "redact_mapping",
    "redact_text",
    "redact_url",
    "redact_value",
    "secret_values",
]

REDACTED = "***"
MAX_DEPTH = 64  # deeper than this, a value is hidden whole: redaction never recurses without end

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_SUBSTRINGS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL")
_WORDS = {"PASS", "AUTH", "OAUTH", "AUTHORIZATION", "CREDS", "COOKIE", "SIGNATURE", "SIG", "DSN"}
_KEY_KINDS = ("API", "ACCESS", "PRIVATE", "SECRET", "SSH", "AUTH", "MASTER", "SIGNING", "ACCOUNT")
_KEYS = {"KEY", "LICENSEKEY", "ENCRYPTIONKEY", *(f"{kind}KEY" for kind in _KEY_KINDS)}
# The next word says the value names a key instead of holding one.
_KEY_POINTERS = {"PATH", "FILE", "DIR", "FOLDER", "ID", "NAME", "TYPE", "SIZE", "LEN", "LENGTH"}
# A name ending so names a kind of failure (KeyError, TokenError, NoCredentialsError,
# InvalidSignatureException, DeprecationWarning), never a place that holds a secret.
_CLASS_ENDS = {"ERROR", "ERRORS", "EXCEPTION", "WARNING", "FAILURE"}
_NOT_AUTH = ("AUTHOR", "AUTHORS", "AUTHORED", "AUTHORITY", "AUTHORITIES")

# -- free-text patterns ------------------------------------------------------------------

# scheme://userinfo@host in every RFC 3986 form: an empty user (``redis://:pw@host``), a
# user alone, sub-delimiters (``!$&'()*+,;=``) and percent-escapes anywhere, and - as
# people write them - '/', '@' and ':' unescaped in the password. The userinfo ends at the
# last '@' followed by a host (a name in any script, or an ``[IPv6]`` literal) and the end
# of the authority. The user has no '/', so ``https://host/@scope/pkg`` (an '@' in a path)
# is left alone, and ``host:8080/path?mail=a@b`` is a port, not a password.
_URL_USERINFO = re.compile(
    r"(?P<scheme>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?P<userinfo>[^\s/?#@:\"<>]*:(?![0-9]*(?:[/?#]|$))(?:(?!://)[^\s\"<>])*"
    r"|[^\s/?#@:\"<>]+)"
    r"@(?=(?:\[[^\]\s/@]*\]|[^\s/?#@:\[\]\"'<>]+)?(?::[0-9]*)?(?:[/?#\s\"'<>]|$))"
)
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"|glpat-[A-Za-z0-9_-]{20,}|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+)"
)
# "Bearer x" anywhere; "Basic x"/"Token x"/"Digest x" only as an Authorization header's
# value ("Basic training" is English).
_SCHEME_VALUE = re.compile(
    r"(\bBearer|(?<=Authorization: )(?:Basic|Token|Digest)|(?<=Authorization=)(?:Basic|Token))"
    r"(\s+)([A-Za-z0-9._~+/=:-]{6,})",
    re.I,
)
_TAIL = r"[^\s\"',;&}\]]"
_QUOTED = r"\"[^\"\n]*\"|'[^'\n]*'"
_ANY_VALUE = rf"(?:(?i:bearer|basic|token|digest)[ \t]+{_TAIL}+|{_QUOTED}|{_TAIL}+)"
# After a space a value never starts with '-': ``--verbose --token x`` must leave
# ``--token`` to be matched itself.
_SPACED_VALUE = rf"(?:{_QUOTED}|(?!-){_TAIL}+)"
_VALUE = re.compile(_ANY_VALUE)
_SPACED = re.compile(_SPACED_VALUE)
# --name=value and --name value anywhere in a command line. Only the name and its
# separator are matched; the value is read after them for a secret name alone (linear
# time on any text) and never consumed, so a secret pair inside another pair's value
# (``https://h/p?token=x``, ``OTHER=HF_TOKEN=x``) is still found.
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_.-]*)(=|[ \t]+)")
# NAME=value, NAME: value, "name": "value", name = 'value', ?name=value. ``line``: the
# name starts its line (after indentation, a list's '-'); ``flow``: a flow mapping's item.
_ASSIGN = re.compile(
    r"(?:(?P<line>^[ \t]*(?:-[ \t]+)?)|(?P<flow>(?<=[{,])[ \t]*))?(?<![\w.-])(?P<q>[\"']?)"
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)(?P<sep>[ \t]*[=:][ \t]*)",
    re.M,
)
_LINE_END = re.compile(r"[ \t]*(?:$|\r|[ \t]#)", re.M)  # the value ends its line (a comment)
_FLOW_END = re.compile(r"[ \t]*[,}]")  # the value ends a flow mapping's item
# NAME: value is prose, not an assignment, unless the name is quoted or an environment
# variable's, the line is YAML's or a header's, or the value looks like a token (see the
# module doc). These names before a colon are always prose ("key: launch.env").
_PROSE = {"auth", "key", "keys"}
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_TOKEN_CHARS, _DIGIT = re.compile(r"[A-Za-z0-9._~+/=-]+"), re.compile(r"[0-9]")
# A command line's flag or override name: --name, NAME, Hydra's +name, ++name, ~name.
_ARG_NAME = re.compile(r"(?:--?|\+\+?|~)?([A-Za-z_][A-Za-z0-9_.-]*)")
# A URL's query parameter (``?token=x``, ``&sig=y``), read where a text holds a URL.
_QUERY_PARAM = re.compile(r"[?&]([^=&#?\s]+)=([^&#\s\"'<>]*)")


# -- names ---------------------------------------------------------------------------------


def _words(name: str) -> list[str]:
    return [w.upper() for w in _WORD_SPLIT.split(name) if w]


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a variable, flag, key or parameter ``name`` holds a secret (see above)."""
    words = _words(name)
    if words and words[-1] in _CLASS_ENDS:
        return False
    for i, word in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if _secret_word(word, nxt, i == 0):
            return True
    return False


def _secret_word(word: str, nxt: str, first: bool) -> bool:
    if any(s in word for s in _SUBSTRINGS) or word in _WORDS:
        return True
    if word == "PWD" and not first:  # MYSQL_PWD; PWD alone is the working directory
        return True
    if word.endswith("TOKEN"):
        return True
    if word.startswith("AUTH") and not word.startswith(_NOT_AUTH):
        return True
    if word.endswith("AUTH") and len(word) > 4 and word not in ("UNAUTH",):
        return True
    return word in _KEYS and nxt not in _KEY_POINTERS


# -- values --------------------------------------------------------------------------------


def redact_value(name: str, value: str) -> str:
    """``value`` as it may be shown: hidden for a secret ``name``, else its text redacted."""
    if is_secret_name(name):
        return REDACTED if value else value
    return redact_text(value)


def redact_url(url: str) -> str:
    """A URL with its credentials and secret query parameters hidden."""
    text = redact_text(url)
    head, sep, query = text.partition("?")
    if not sep:
        return text
    query, hsep, fragment = query.partition("#")
    parts = []
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        secret = eq and value != REDACTED and _secret_param(name)
        parts.append(f"{name}={REDACTED}" if secret else pair)
    return f"{head}?{'&'.join(parts)}{hsep}{fragment}"


def _secret_param(name: str) -> bool:
    """A URL query parameter naming a secret (``access%5Ftoken``: its name unescaped)."""
    return is_secret_name(unquote(name))


def redact_text(text: str) -> str:
    """Free text (a log line, a command, an error message) with every secret hidden."""
    if not text:
        return text
    # Each pass only where it can match: this runs on every log line and record.
    if "@" in text and "://" in text:
        text = _URL_USERINFO.sub(_hidden_userinfo, text)
    text = _KNOWN_TOKENS.sub(REDACTED, text)
    if "earer" in text or "EARER" in text or "uthorization" in text or "UTHORIZATION" in text:
        text = _SCHEME_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if "-" in text:
        text = _hide_values(_FLAG, text, _flag_value)
    if "=" in text or ":" in text:
        text = _hide_values(_ASSIGN, text, _assigned_value)
    return text


def _hidden_userinfo(m: re.Match[str]) -> str:
    """A URL's userinfo hidden whole when it holds a secret; a username alone is shown."""
    return f"{m.group('scheme')}{REDACTED}@" if _url_secret(m.group("userinfo")) else m.group()


def _url_secret(userinfo: str) -> str:
    """A URL's secret: its password (the user of ``redis://:pw@h`` is empty), or a user
    alone shaped like a token (``https://<token>@host``); '' for a username alone."""
    user, colon, password = userinfo.partition(":")
    return password if colon else (user if _token_like(unquote(user)) else "")


def _token_like(value: str) -> bool:
    """Shaped like a generated credential, not a word or a name (see the module doc)."""
    if len(value) < 8 or not _TOKEN_CHARS.fullmatch(value) or not _DIGIT.search(value):
        return False
    lower, upper = value.upper() != value, value.lower() != value
    return (lower and upper) or (len(value) >= 16 and (lower or upper))


def _hide_values(
    pattern: re.Pattern[str], text: str, pick: Callable[[re.Match[str]], re.Match[str] | None]
) -> str:
    """Hide the value ``pick(m)`` reads after every secret name. A name inside a value
    already read is part of it: each character is read once (linear time on any text)."""
    out, last, read = [], 0, 0
    for m in pattern.finditer(text):
        value = None if m.start() < read else pick(m)
        if value is None:
            continue
        read = value.end()
        if REDACTED in value.group() or _placeholder(value.group()):
            continue
        out += [text[last : value.start()], _hidden(value.group())]
        last = value.end()
    return "".join(out) + text[last:] if out else text


def _flag_value(m: re.Match[str]) -> re.Match[str] | None:
    if not is_secret_name(m.group(1).lstrip("-")):
        return None
    return (_VALUE if m.group(2) == "=" else _SPACED).match(m.string, m.end())


def _placeholder(value: str) -> bool:
    """A usage hint's stand-in (``KEY=VALUE``, ``--token <token>``), not a value."""
    bare = value.strip("\"'")
    return not bare or bare in ("VALUE", "...", "TOKEN", "KEY") or bare.startswith("<")


def _assigned_value(m: re.Match[str]) -> re.Match[str] | None:
    quoted, name, sep = m.group("q"), m.group("name"), m.group("sep")
    if not is_secret_name(name):
        return None
    value = _VALUE.match(m.string, m.end())
    if value is None or "=" in sep or quoted:
        return value  # NAME=value, "name": value
    if name.lower() in _PROSE:
        return None
    end = _LINE_END if m.start("line") >= 0 else _FLOW_END if m.start("flow") >= 0 else None
    ends = end is not None and end.match(m.string, value.end())
    token = _token_like(value.group().strip("\"'"))
    return value if _ENV_NAME.fullmatch(name) or ends or token else None


def _hidden(value: str) -> str:
    """``***``, keeping the quotes around a quoted value."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{REDACTED}{value[0]}"
    return REDACTED


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with secrets hidden: ``--token x``, ``--token=x``, ``KEY=x``, URLs.

    A value after a secret flag is hidden whether it follows in the same argument or the
    next one (``["--api-key", "abc"]``).
    """
    return [
        redact_text(arg) if secret is None else (head + REDACTED if secret else arg)
        for arg, head, secret in _argv_items(argv)
    ]


def _argv_items(argv: Iterable[str]) -> Iterator[tuple[str, str, str | None]]:
    """Each argument as ``(arg, what stays of it, its secret value or None)``."""
    hide_next = False
    for arg in map(str, argv):
        if hide_next and not arg.startswith("--"):
            hide_next = False
            yield arg, "", arg
            continue
        name, eq, value = arg.partition("=")
        if eq and _secret_arg(name):
            hide_next = False
            yield arg, f"{name}=", value
            continue
        hide_next = arg.startswith("-") and not eq and _secret_arg(arg)
        yield arg, arg, None


def _secret_arg(name: str) -> bool:
    """A flag or an override naming a secret: ``--hf-token``, ``DB_PASSWORD``, and
    Hydra's ``+wandb.api_key``, ``++db.password``, ``~x.token``, judged by the last
    dotted part (``auth.enabled=true`` sets no secret)."""
    m = _ARG_NAME.fullmatch(name)
    return m is not None and is_secret_name(m.group(1).rpartition(".")[2])


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables as they may be shown (names kept, secret values hidden)."""
    return {str(k): redact_value(str(k), str(v)) for k, v in env.items()}


def redact_mapping(values: Mapping[Any, Any], secrets: Sequence[str] = ()) -> dict[Any, Any]:
    """A deep copy with every value under a secret key hidden, all text redacted and every
    known secret value (:func:`secret_values`) in it scrubbed.

    Lists of strings are read as command lines (:func:`redact_argv`), so a flag and its
    value in two items are redacted together.
    """
    shown = _redact_dict(values, 0)
    return _scrub_all(shown, secrets) if secrets else shown


def _scrub_all(value: Any, secrets: Sequence[str]) -> Any:
    """Every string in ``value`` scrubbed (its depth is bounded by the redaction)."""
    if isinstance(value, Mapping):
        return {k: _scrub_all(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_all(v, secrets) for v in value]
    return scrub(value, secrets) if isinstance(value, str) else value


def _redact_dict(values: Mapping[Any, Any], depth: int) -> dict[Any, Any]:
    return {key: _redact_item(str(key), value, depth + 1) for key, value in values.items()}


def _redact_item(key: str, value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return REDACTED
    if is_secret_name(key):
        return _hide_all(value, depth)
    if isinstance(value, Mapping):
        return _redact_dict(value, depth)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            return redact_argv(value)
        return [_redact_item(key, v, depth + 1) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _hide_all(value: Any, depth: int) -> Any:
    """Everything under a secret key: strings and numbers hidden, the shape kept."""
    if depth > MAX_DEPTH:
        return REDACTED
    if isinstance(value, Mapping):
        return {k: _hide_all(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hide_all(v, depth + 1) for v in value]
    if isinstance(value, bool) or value is None or value == "":
        return value
    return REDACTED if isinstance(value, (str, int, float)) else value


def secret_values(
    *envs: Mapping[str, str], argv: Iterable[str] = (), minimum: int = 4
) -> tuple[str, ...]:
    """The values that must never be written verbatim: those of secret-named variables
    of each of ``envs``, of secret flags and overrides in ``argv`` (``--hf-token V``,
    ``--password=V``, ``+db.password=V``), and the credentials and secret query
    parameters of URLs in any of them; each also as ``repr()``, ``json.dumps`` and
    percent-encoding write it (longest first, so a secret that contains another is
    replaced whole). Short values are left out: hiding every ``1`` would garble a log
    without protecting anything."""
    args = [str(arg) for arg in argv]
    named = [value for env in envs for name, value in env.items() if is_secret_name(name)]
    named += [secret for _, _, secret in _argv_items(args) if secret]
    for text in (*(value for env in envs for value in env.values()), *args):
        if "://" in text:
            named += _url_secrets(text)
    found = {form for value in named if len(value) >= minimum for form in _written_forms(value)}
    return tuple(sorted(found, key=len, reverse=True))


def _url_secrets(text: str) -> Iterator[str]:
    """The passwords and secret query parameters of the URLs in ``text``, as written
    and unescaped."""
    for m in _URL_USERINFO.finditer(text):
        password = _url_secret(m.group("userinfo"))
        yield from (password, unquote(password))
    for m in _QUERY_PARAM.finditer(text):
        if _secret_param(m.group(1)):
            yield from (m.group(2), unquote(m.group(2)))


def _written_forms(secret: str) -> set[str]:
    """``secret`` and the escaped forms a script writes it in: inside a ``repr()``
    or a JSON string, and percent-encoded (``quote(s, safe="")``)."""
    inner = (repr(secret), json.dumps(secret), json.dumps(secret, ensure_ascii=False))
    return {secret, quote(secret, safe=""), *(text[1:-1] for text in inner)}


def scrub(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of one of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
