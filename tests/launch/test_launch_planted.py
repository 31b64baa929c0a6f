"""The 21 planted secrets of issue 22: values a run is given in ``launch.env``, ``--env``
and its script's argv, in every form a secret takes (URLs with an empty user, a ``'``
in the password, a non-ASCII or IPv6 host; ``MYSQL_PWD``; a flag's value) reach the
worker and never appear in clear in any file accel writes under ``.accelerate/``, on the
console, in a view or on a sync remote, even when the worker prints them and raises them in its error.
The worker's own error stays readable: ``KeyError: 'learning_rate'`` is shown as is."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import run_folder

from accel.cli.main import main

LAUNCH_ENV = {
    "HF_TOKEN": "plainHfTok1111",
    "MYSQL_PWD": "mysqlPwd2222",
    "REDIS_URL": "redis://:redisPw3333@cache.example:6379/0",
    "DATABASE_URL": "postgres://app:it'sPw4444@db.example/x",
    "STORE_URL": "https://u:idnPw5555@bücher.example/x",
    "V6_URL": "https://u:v6Pw6666@[2001:db8::1]:8443/",
    "SUB_URL": "https://u:sub!$&()*+,;=7777@h.example/",
    "PCT_URL": "https://u:pct%40Pw8888@h.example/",
    "GIT_URL": "https://userTok9999@git.example/r.git",
    "CLIENT_SECRET": "clientSecret1919",
}
DASH_ENV = {
    "WANDB_API_KEY": "wandbKey1010",
    "DB_PASS": "dbPass1111x",
    "LDAP_PASSWD": "ldapPw1212",
    "AWS_SECRET_ACCESS_KEY": "awsSecret1313",
    "GITHUB_TOKEN": "ghp_abcdefghijklmnopqrstuv1818",
    "SMTP_PASSWORD": "smtpPw2020",
}
ARGV = [
    "--hf-token",
    "argvTok1414",
    "--password=argvPw1515",
    "--api-key",
    "argvKey1616",
    "--store",
    "https://:argvUrl1717@s.example/b",
    "--auth-token",
    "authTok2121",
]
PLANTED = [
    "plainHfTok1111",
    "mysqlPwd2222",
    "redisPw3333",
    "it'sPw4444",
    "idnPw5555",
    "v6Pw6666",
    "sub!$&()*+,;=7777",
    "pct%40Pw8888",
    "pct@Pw8888",
    "userTok9999",
    "wandbKey1010",
    "dbPass1111x",
    "ldapPw1212",
    "awsSecret1313",
    "argvTok1414",
    "argvPw1515",
    "argvKey1616",
    "argvUrl1717",
    "ghp_abcdefghijklmnopqrstuv1818",
    "clientSecret1919",
    "smtpPw2020",
    "authTok2121",
]

SCRIPT = """
import argparse, os, sys
p = argparse.ArgumentParser()
for flag in ("--hf-token", "--password", "--api-key", "--store", "--auth-token"):
    p.add_argument(flag)
args = p.parse_args()
names = {names!r}
print("argv:", sys.argv, flush=True)
print("args:", args, flush=True)
print("env:", {{n: os.environ[n] for n in names}}, flush=True)
print("stderr:", " ".join(os.environ[n] for n in names), file=sys.stderr, flush=True)
try:
    {{}}["learning_rate"]
except KeyError as exc:
    raise RuntimeError(
        "cannot log in with " + " ".join([*vars(args).values(), *map(os.environ.get, names)])
    ) from exc
"""


def config_text() -> str:
    env = "".join(f"    {name}: {json.dumps(value)}\n" for name, value in LAUNCH_ENV.items())
    return f"version: 1\nlaunch:\n  use_cpu: true\n  env:\n{env}"


def assert_clean(text: str, where: str) -> None:
    leaked = [secret for secret in PLANTED if secret in text]
    assert not leaked, f"{leaked} in clear in {where}"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_no_planted_secret_appears_in_clear_anywhere(
    project: Path,
    accel: Callable[..., subprocess.CompletedProcess[str]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    config = project / ".accelerate" / "config" / "accelerate_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(config_text())
    names = [*LAUNCH_ENV, *DASH_ENV]
    (project / "leak.py").write_text(SCRIPT.format(names=names))
    dash_env = [arg for name, value in DASH_ENV.items() for arg in ("--env", f"{name}={value}")]

    done = accel("launch", "-n", "1", *dash_env, "leak.py", *ARGV, timeout=180)
    assert done.returncode == 1, done.stderr
    folder = run_folder(project)
    rank_log = (folder / "rank-0.log").read_text()
    assert "argv:" in rank_log and "learning_rate" in rank_log  # the worker ran and printed
    assert_clean(done.stdout + done.stderr, "the console")
    assert "RuntimeError: cannot log in with ***" in done.stderr

    written = sorted(p for p in (project / ".accelerate").rglob("*") if p.is_file())
    assert folder / "run.json" in written
    for path in written:
        if path != config:  # the user's own file keeps the real values
            assert_clean(path.read_text(errors="replace"), str(path.relative_to(project)))

    # redaction hides what is secret, not the worker's error around it
    assert "KeyError: 'learning_rate'" in rank_log
    record = json.loads((folder / "run.json").read_text())
    assert "KeyError: 'learning_rate'" in record["error"]["traceback"]
    assert record["error"]["message"].startswith("cannot log in with ***")

    views = [
        ["runs", "show"],
        ["runs", "show", "--json"],
        ["logs"],
        ["logs", "--json"],
        ["config", "show"],
        ["config", "get", "launch.env"],
        ["launch", "--dry-run", *dash_env, "leak.py", *ARGV],
    ]
    for view in views:
        capsys.readouterr()
        main(view)
        out, err = capsys.readouterr()
        assert out + err, view
        assert_clean(out + err, " ".join(view))

    remote = tmp_path / "remote"
    assert main(["sync", "push", remote.as_uri()]) == 0
    uploaded = sorted(p for p in remote.rglob("*") if p.is_file())
    assert {"rank-0.log", "run.json", "accelerate_config.yaml"} <= {p.name for p in uploaded}
    for path in uploaded:
        assert_clean(path.read_text(errors="replace"), f"the remote's {path.name}")
