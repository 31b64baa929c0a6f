"""``--env`` and ``launch.env`` cannot ask for what the launcher itself sets in every
worker (RANK, MASTER_PORT, ACCEL_RUN_ID, ...): it would be overridden without a word.

Refused at plan time (``--dry-run`` shows it), exit 2 and one line naming the variable.
"""

from __future__ import annotations

import inspect
import json
import re

import pytest
from launchutil import SCRIPTS

from accel.cli.main import main
from accel.workspace import Workspace

SCRIPT = str(SCRIPTS / "env_dump.py")
SET_BY_THE_LAUNCHER = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "ACCEL_WORKSPACE",
    "ACCEL_RUN_ID",
    "ACCEL_RUN_DIR",
    "ACCEL_LAUNCHER_PID",
    "PYTHONUNBUFFERED",
)


def dry_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["launch", "--dry-run", "--json", *args, SCRIPT])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", SET_BY_THE_LAUNCHER)
def test_env_of_a_variable_the_launcher_sets_is_refused(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, out, err = dry_run(capsys, "--env", f"{name}=5")
    assert code == 2, out + err
    assert err == f"error: --env cannot set {name}: accel launch sets it for every worker\n"
    assert out == ""


@pytest.mark.parametrize("name", ["RANK", "MASTER_PORT", "TORCHELASTIC_MAX_RESTARTS"])
def test_launch_env_of_a_variable_the_launcher_sets_is_refused(
    ws: Workspace, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    ws.config_file.write_text(f"launch:\n  env:\n    {name}: '5'\n")
    code, out, err = dry_run(capsys)
    assert code == 2, out + err
    assert err == f"error: launch.env cannot set {name}: accel launch sets it for every worker\n"
    assert out == ""
    assert not ws.runs_dir.exists() or not any(ws.runs_dir.iterdir())


def test_what_the_workers_may_be_given_is_still_given(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.config_file.write_text("launch:\n  env:\n    TORCH_NCCL_ASYNC_ERROR_HANDLING: '0'\n")
    code, out, err = dry_run(capsys, "--env", "OMP_NUM_THREADS=3", "--env", "RANKING=top")
    assert code == 0, err
    env = json.loads(out)["worker_env"]
    assert env["OMP_NUM_THREADS"] == "3" and env["RANKING"] == "top"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"  # torch's agent passes it on


def test_every_variable_torchs_agent_sets_is_refused() -> None:
    """The installed torch's own list (its agent's worker environment), against accel's."""
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    from accel.launch.launcher_env import launcher_sets

    source = inspect.getsource(LocalElasticAgent._start_workers)
    set_there = set(re.findall(r'"([A-Z][A-Z0-9_]*)": ', source)) | {"LOCAL_RANK"}
    # read from the launcher's own environment (os.getenv), where --env puts it: honoured
    honoured = set(re.findall(r'"([A-Z][A-Z0-9_]*)": os\.getenv', source))
    assert "RANK" in set_there and "MASTER_PORT" in set_there  # the pattern reads the source
    missing = sorted(n for n in set_there - honoured if not launcher_sets(n))
    assert missing == []
    assert not any(launcher_sets(n) for n in honoured)
