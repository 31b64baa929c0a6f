"""How workers end: accel destroys the group it started, and tolerates torch's teardown."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from launchutil import SCRIPTS, assert_no_orphans, pid_alive, run_json

from run_helpers import Accel, two_ranks

# Leans on torch's internals: the tests marked `edge` also run on the oldest and the
# newest torch (.ci/run), one case per journey; the rest run on the default.


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_script_that_never_calls_end_ends_its_group(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    script = str(SCRIPTS / "acc_no_end.py")
    # The abort at exit came on 2 of 2 crash-restart runs; the plain runs check the
    # (deterministic) order of teardown against the script's own exit handler.
    runs = [("launch", "-n", "2", script, str(out))] * 2
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
    assert [r["status"] for r in records] == ["succeeded"] * 3
    assert max(r["restarts"] for r in records) == 1
    for record in records:
        assert_no_orphans(record["id"])


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("mode", "flags", "said"),
    [
        pytest.param(
            "abort", (), "rank 1 finished; died of SIGABRT in teardown", marks=pytest.mark.edge
        ),
        ("segv", (), "rank 1 finished; died of SIGSEGV in teardown"),
        pytest.param(
            "hang", (), "rank 1 finished; hung in teardown, ended after 5 s", marks=pytest.mark.edge
        ),
        ("hang", ("--preload",), "rank 1 finished; hung in teardown, ended after 5 s"),
        ("handler", (), "rank 1 finished; hung in teardown, ended after 7 s"),
    ],
)
def test_a_rank_that_finished_and_then_hangs_or_dies_in_teardown_has_finished(
    accel: Accel, project: Path, mode: str, flags: tuple[str, ...], said: str
) -> None:
    out = project / "out"
    out.mkdir()
    script = str(SCRIPTS / "teardown.py")
    done = accel(
        "launch",
        "-n",
        "2",
        *flags,
        "--stop-grace-period",
        "2s",
        script,
        str(out),
        mode,
        timeout=100,  # bounded: before, a rank hung in teardown hung the run forever
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "rank-1.returned").read_text() == mode
    assert f"accel: {said}" in done.stderr + done.stdout
    pid = int((out / "rank-1.pid").read_text())
    assert not pid_alive(pid)
    record = run_json(project)
    assert record["status"] == "succeeded" and record["exit_code"] == 0, record
    (ended,) = record["teardown"]
    assert ended["rank"] == 1 and ended["code"] == 0 and ended["message"] == said
    assert ended["what"] == ("hung" if mode in ("hang", "handler") else "ended")
    shown = accel("runs", "show", record["id"])
    assert f"teardown  {said}" in shown.stdout
    assert_no_orphans(record["id"])


def _direct(out: Path, mode: str) -> tuple[list[int], list[str]]:
    """Two ranks of scripts/acc_exit.py without a launcher (as torchrun's workers, or a
    test's ranks): their exit codes and what each printed on stderr."""
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL")}
    env.update(ACCEL_WORKSPACE=str(out.parent / ".accelerate"), OMP_NUM_THREADS="1")
    codes = two_ranks(SCRIPTS / "acc_exit.py", [str(out), mode], env, errors=out)
    return codes, [(out / f"err-{r}.txt").read_text() for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", [pytest.param("both", marks=pytest.mark.edge), "stuck"])
def test_a_script_that_raises_neither_aborts_nor_hangs_at_exit(project: Path, mode: str) -> None:
    """A rank whose script raised exits 1, as python does, whatever torch's teardown does
    beside a stuck peer; its group is destroyed (left standing, gloo aborts at exit).

    Both ranks raising: the destruction usually ends at once, before the script's own
    exit handler. On torch 2.6 under load it can hang beside the exiting peer (CI, three
    suites on 2 cores: once past 60 s); then the grace ends the rank, exit 1, and only
    then is that handler skipped."""
    from accel.accelerator._setup import CRASHED_TEARDOWN_GRACE

    for _ in range(3):
        (project / "out" / "exit-0").unlink(missing_ok=True)  # each run writes its own
        started = time.monotonic()
        codes, errors = _direct(project / "out", mode)
        took = time.monotonic() - started
        assert codes == [1, 1], errors
        assert not any("terminate called" in e for e in errors), errors
        assert "RuntimeError: rank 0 crashed" in errors[0]
        if mode == "both":
            exit_0 = project / "out" / "exit-0"
            if exit_0.exists():  # the destruction ended, before the script's own handler
                assert exit_0.read_text().split()[1] == "False", errors
            else:  # it hung, and nothing but the grace ended the rank
                assert took >= CRASHED_TEARDOWN_GRACE, (took, errors)


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_rank_that_returns_first_waits_for_its_peer_before_destroying_the_group(
    project: Path,
) -> None:
    """Destroying the gloo group while a peer is still in its last collective aborts the
    peer (two ranks refusing one checkpoint: 1 abort in 12 under load). Without end(),
    accel's exit waits (gloo's bounded monitored_barrier) for the peers to exit too."""
    out = project / "out"
    codes, errors = _direct(out, "late")
    assert codes == [0, 0], errors
    late = float((out / "late").read_text())
    exits = [(out / f"exit-{r}").read_text().split() for r in (0, 1)]
    assert [standing for _, standing in exits] == ["False", "False"], errors
    assert float(exits[0][0]) >= late, "rank 0 destroyed its group before rank 1 arrived"
