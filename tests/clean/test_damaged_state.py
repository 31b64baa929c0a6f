"""A damaged ``state.bin`` is reported where a damaged checkpoint is: by the scan that
``accel status``, ``accel env --check`` and ``accel clean`` share, and never removed."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accel.clean import scan
from accel.cli.main import main
from accel.errors import IntegrityError
from accel.workspace import Workspace


def _truncated(ws: Workspace) -> None:
    ws.store.set("important", {"step": 1})
    raw = ws.state_file.read_bytes()
    ws.state_file.write_bytes(raw[: len(raw) // 2])


def _fifo(ws: Workspace) -> None:
    os.mkfifo(ws.state_file)


@pytest.mark.parametrize(
    ("damage", "says"),
    [(_truncated, "its length does not match its header"), (_fifo, "is a FIFO")],
    ids=["truncated", "fifo"],
)
def test_a_damaged_state_file_is_reported_by_status_env_and_clean(
    ws: Workspace,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Workspace], None],
    says: str,
) -> None:
    damage(ws)
    with pytest.raises(IntegrityError, match=says):
        ws.store.get("important")
    (found,) = [i for i in scan(ws, time.time()).left_alone if i.path == ws.state_file]
    assert found.kind == "unreadable" and says in (found.detail or "")

    assert main(["status", "--json"]) == 0
    (alone,) = json.loads(capsys.readouterr().out)["left_alone"]
    assert alone["path"] == str(ws.state_file) and says in alone["detail"]
    assert main(["status"]) == 0
    assert says in capsys.readouterr().out
    assert main(["env", "--check"]) == 1
    out = capsys.readouterr()
    assert f"{ws.state_file} " in out.out + out.err and says in out.out + out.err
    assert "neither loads" not in out.out  # the store loads it: its own advice stands alone
    assert main(["clean", "--older-than", "0s", "--keep-last", "0", "--yes"]) == 0
    assert os.path.lexists(ws.state_file)


def test_a_whole_state_file_is_not_reported(ws: Workspace, project: Path) -> None:
    ws.store.set("important", {"step": 1})
    assert scan(ws, time.time()).left_alone == ()
