"""Secrets given to a run (``launch.env``, ``--env``, argv, URLs) reach the worker and
nothing else: not run.json, the rank logs, ``runs show``, ``launch --dry-run``,
``config show``/``get``, training.log or what ``sync push`` uploads."""

from __future__ import annotations

import json
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import run_folder

from accel.cli.main import main

TOKEN = "hf_Tok3nValueNeverShown"  # launch.env HF_TOKEN
URL_SECRET = "pa/ss@w0rd:x"  # the password of a URL in launch.env
WANDB = "wandb-s3cret-9f8e7d"  # --env WANDB_API_KEY=
ARG_KEY = "argv-key-5b4a3c"  # --api-key on the script's command line
SECRETS = (TOKEN, URL_SECRET, WANDB, ARG_KEY)

SCRIPT = """
import os, sys
assert os.environ["HF_TOKEN"] == {token!r}, "the worker must get the real token"
assert os.environ["WANDB_API_KEY"] == {wandb!r}
assert sys.argv[-1] == {arg!r}
print("token is", os.environ["HF_TOKEN"], "and key", os.environ["WANDB_API_KEY"], flush=True)
raise RuntimeError("cannot reach " + os.environ["PIP_INDEX_URL"])
"""


def config_text() -> str:
    return (
        "version: 1\n"
        "launch:\n"
        "  use_cpu: true\n"
        "  env:\n"
        f"    HF_TOKEN: {TOKEN}\n"
        f"    PIP_INDEX_URL: 'https://bob:{URL_SECRET}@idx.example/simple'\n"
    )


def assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} in clear in {where}"


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o007 == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_secret_leaves_the_worker(
    project: Path,
    accel: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = project / ".accelerate" / "config" / "accelerate_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(config_text())
    (project / "leak.py").write_text(SCRIPT.format(token=TOKEN, wandb=WANDB, arg=ARG_KEY))
    argv = ("launch", "-n", "1", "--env", f"WANDB_API_KEY={WANDB}", "leak.py", "--api-key")

    done = accel(*argv, ARG_KEY)
    assert done.returncode == 1, done.stderr  # the script's RuntimeError, after its checks
    assert "RuntimeError: cannot reach https://***@idx.example" in done.stderr
    # the worker's traceback, on stderr as the worker wrote it
    assert "[rank0] RuntimeError: cannot reach https://bob:***@idx.example" in done.stderr
    assert_clean(done.stdout + done.stderr, "the console")

    folder = run_folder(project)
    for path in sorted(folder.iterdir()):
        if path.is_file():
            assert_clean(path.read_text(errors="replace"), str(path))
    record = json.loads((folder / "run.json").read_text())
    assert record["config"]["launch"]["env"]["HF_TOKEN"] == "***"
    assert record["command"][-2:] == ["--api-key", "***"]
    assert "token is *** and key ***" in (folder / "rank-0.log").read_text()
    assert private(folder / "run.json") and private(folder / "rank-0.log")

    views = [
        ["runs", "show"],
        ["runs", "show", "--json"],
        ["runs", "--json"],
        ["launch", "--dry-run", "--env", f"WANDB_API_KEY={WANDB}", "leak.py", "--api-key", ARG_KEY],
        ["launch", "--dry-run", "--json", "leak.py", "--api-key", ARG_KEY],
        ["config", "show"],
        ["config", "show", "--json", "--origin"],
        ["config", "get", "launch.env"],
    ]
    for view in views:
        capsys.readouterr()
        assert main(view) == 0, view
        out, err = capsys.readouterr()
        assert_clean(out + err, " ".join(view))
    assert main(["config", "set", "launch.env", f"HF_TOKEN={TOKEN}"]) == 0
    assert_clean("".join(capsys.readouterr()), "config set")

    remote = tmp_path / "remote"
    assert main(["sync", "push", remote.as_uri()]) == 0
    uploaded = [p for p in remote.rglob("*") if p.is_file()]
    assert any(p.name == "accelerate_config.yaml" for p in uploaded)
    for path in uploaded:
        assert_clean(path.read_text(errors="replace"), f"the remote's {path.name}")
    log = project / ".accelerate" / "logs" / "training.log"
    assert_clean(log.read_text(), "training.log")
    assert private(log)
    assert TOKEN in config.read_text()  # the user's own file keeps the real value
