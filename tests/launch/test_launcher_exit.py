"""Once a run is over and recorded, the launcher exits without the interpreter's
teardown of torch, whatever the run's verdict. After an interrupted run that teardown
aborted the launcher once in CI (CI105: "terminate called without an active
exception", exit -6 where 143 was due): a C++ thread destroyed at exit. Only a
succeeded run skipped it."""

from __future__ import annotations

from pathlib import Path

import pytest

from run_helpers import Accel, free_port

# Loaded by every Python started with this PYTHONPATH; only the launcher (the `accel`
# executable, not its workers) gets an exit handler that aborts as torch's teardown did.
SITE = """import atexit, os, sys
if os.path.basename(sys.argv[0]) == "accel" and sys.argv[1:2] == ["launch"]:
    atexit.register(os.abort)
"""


# A second node that never comes: the rendezvous times out and the launch raises out of
# the run (after recording it) instead of returning a verdict.
ALONE = ("--nnodes", "2", "--node-rank", "0", "--main-process-ip", "127.0.0.1",
         "--rdzv-conf", "join_timeout=2")  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("script", "flags", "code", "said"),
    [
        ("ok", (), 0, "succeeded"),
        ("fails", (), 1, "failed"),
        ("ok", ALONE, 1, "error: the other nodes did not join the rendezvous in time"),
    ],
    ids=["succeeded", "failed", "rendezvous-timed-out"],
)
def test_the_launcher_skips_the_interpreters_teardown_whatever_the_verdict(
    accel: Accel,
    project: Path,
    tmp_path: Path,
    script: str,
    flags: tuple[str, ...],
    code: int,
    said: str,
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE, encoding="utf-8")
    (project / "ok.py").write_text("print('ran')\n", encoding="utf-8")
    (project / "fails.py").write_text("raise SystemExit(1)\n", encoding="utf-8")
    port = ("--main-process-port", str(free_port())) if flags else ()
    done = accel("launch", *flags, *port, f"{script}.py", env={"PYTHONPATH": str(site)})
    assert done.returncode == code, done.stderr
    assert said in done.stderr
    (run,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    assert (run / "run.json").is_file()  # recorded before the exit
