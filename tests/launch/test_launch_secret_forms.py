"""A real run whose script writes its secrets as scripts do: Hydra overrides and URL
query strings on its command line, ``repr()``, ``json.dumps`` and percent-encoded forms,
a metric, and a ``sys.exit()`` message cut short: none in clear in any file under
``.accelerate/``, on the console or in ``runs show``."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import run_folder

from accel.cli.main import main

SCRIPT = r"""
import json, os, sys
from urllib.parse import quote
import accel
pw, token = os.environ["DB_PASSWORD"], os.environ["HF_TOKEN"]
print("overrides:", sys.argv[1:], flush=True)
print("config:", json.dumps({"db_password": pw}), repr(pw), quote(pw, safe=""), flush=True)
accel.Accelerator().log({"loss": 1.0, "hf_token": token, "note": "auth with " + token}, step=1)
sys.exit("could not reach the hub, details: " + "x" * 450 + " " + token)
"""
ARGV = ["+wandb.api_key=mysekritHydra1", "++db.password=mysekritHydra2"]
ARGV += ["--data-url", "https://h.example/d?token=mysekritQuery&part=1"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_secret_in_a_form_scripts_write_appears_in_clear(
    project: Path,
    accel: Callable[..., subprocess.CompletedProcess[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    (project / "forms.py").write_text(SCRIPT)
    env = ["--env", "DB_PASSWORD=mysekritPw\\1", "--env", "HF_TOKEN=mysekrit" + "Z" * 24]
    done = accel("launch", "-n", "1", "--cpu", *env, "forms.py", *ARGV, timeout=150)
    assert done.returncode == 1, done.stderr
    assert "xxx ***" in done.stderr and "mysek" not in done.stdout + done.stderr
    folder = run_folder(project)
    assert "overrides:" in (folder / "rank-0.log").read_text()  # the worker ran
    for path in (p for p in (project / ".accelerate").rglob("*") if p.is_file()):
        assert "mysek" not in path.read_text(errors="replace"), path
    capsys.readouterr()
    main(["runs", "show"])
    out, err = capsys.readouterr()
    assert "xxx ***" in out + err and "mysek" not in out + err
