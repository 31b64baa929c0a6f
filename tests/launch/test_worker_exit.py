"""How workers end: accel destroys the group it started, and tolerates torch's teardown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launchutil import SCRIPTS, assert_no_orphans

from run_helpers import Accel


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_that_never_calls_end_ends_its_group(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    script = str(SCRIPTS / "acc_no_end.py")
    runs = [("launch", "-n", "2", script, str(out))] * 4
    runs.append(("launch", "-n", "2", "--max-restarts", "1", script, str(out), "crash"))
    for args in runs:
        done = accel(*args, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "terminate called" not in done.stderr
        # Destroyed before the script's own (earlier registered) exit handler ran.
        seen = {p.name: p.read_text() for p in out.iterdir()}
        assert seen and set(seen.values()) == {"False"}, seen
        for p in out.iterdir():
            p.unlink()
    records = json.loads(accel("runs", "--json").stdout)
    assert [r["status"] for r in records] == ["succeeded"] * 5
    assert max(r["restarts"] for r in records) == 1
    for record in records:
        assert_no_orphans(record["id"])
