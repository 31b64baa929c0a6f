"""A run whose last saves met a reader (an export, a verify) still ends with
``keep_last`` checkpoints: the launcher pays the retention the reader held back once
the run is over (accel.store.lease)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from launchutil import SCRIPTS

import run_helpers
from accel import Workspace, _locks
from accel.layout import series_readers_lock

StartAccel = Callable[..., subprocess.Popen[str]]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_run_whose_last_saves_met_a_reader_ends_with_keep_last(
    start_accel: StartAccel, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "1")
    ws = Workspace.discover().ensure()
    out = project / "out"
    out.mkdir()

    def steps() -> list[int]:
        return [info.step for info in ws.checkpoints.list("kept")]

    script = str(SCRIPTS / "save_then_wait.py")
    with _locks.shared(series_readers_lock(ws.path, "kept")):  # a reader, for the saves
        run = start_accel("launch", "-n", "1", "--run-name", "kept", script, str(out))
        run_helpers.wait_for(
            lambda: (out / "saved").exists() or run.poll() is not None, 150, "the saves"
        )
        assert run.poll() is None, run.communicate()
        assert steps() == [1, 2, 3]  # nothing retired under the reader
    (out / "go").touch()  # the reader is gone; the run ends without another save
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stdout + stderr
    assert steps() == [3]
