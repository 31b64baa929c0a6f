"""Once a run is over and recorded, the launcher exits without the interpreter's
teardown of torch, whatever the run's verdict. After an interrupted run that teardown
aborted the launcher once in CI (CI105: "terminate called without an active
exception", exit -6 where 143 was due): a C++ thread destroyed at exit. Only a
succeeded run skipped it."""

from __future__ import annotations

from pathlib import Path

import pytest

from run_helpers import Accel

# Loaded by every Python started with this PYTHONPATH; only the launcher (the `accel`
# executable, not its workers) gets an exit handler that aborts as torch's teardown did.
SITE = """import atexit, os, sys
if os.path.basename(sys.argv[0]) == "accel" and sys.argv[1:2] == ["launch"]:
    atexit.register(os.abort)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("script", "code"), [("ok", 0), ("fails", 1)])
def test_the_launcher_skips_the_interpreters_teardown_whatever_the_verdict(
    accel: Accel, project: Path, tmp_path: Path, script: str, code: int
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE, encoding="utf-8")
    (project / "ok.py").write_text("print('ran')\n", encoding="utf-8")
    (project / "fails.py").write_text("raise SystemExit(1)\n", encoding="utf-8")
    done = accel("launch", f"{script}.py", env={"PYTHONPATH": str(site)})
    assert done.returncode == code, done.stderr
    (run,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    assert (run / "run.json").is_file()  # recorded before the exit
