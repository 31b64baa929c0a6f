"""checkpoints.snapshot_every under accel launch: snapshots in the launcher's shared
memory, persisted every persist_every steps and at a failure (accel.store.memtier)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, assert_no_orphans, refused, wait_for

import run_helpers
from accel.store.manifest import STATE_TENSORS as STATE
from accel.store.memtier import PREFIX

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train.py"
Accel = Callable[..., subprocess.CompletedProcess[str]]
TRAIN = ["--steps", "12", "--log-every", "4"]


def snapshots(every: int, persist: int | None = None) -> dict[str, str]:
    env = {"ACCEL_CHECKPOINTS_SNAPSHOT_EVERY": str(every)}
    if persist is not None:
        env["ACCEL_CHECKPOINTS_PERSIST_EVERY"] = str(persist)
    return env


def manifests(project: Path, series: str) -> dict[int, dict[str, object]]:
    folder = project / ".accelerate" / "checkpoints" / series
    found = {}
    for step_dir in sorted(folder.glob("step-*")):
        manifest = json.loads((step_dir / "manifest.json").read_text())
        found[manifest["step"]] = manifest
    return found


def checksums(manifest: dict[str, object]) -> dict[str, str]:
    files = manifest["files"]
    assert isinstance(files, dict)
    return {name: digest["checksum"] for name, digest in files.items()}


def run_id(result: subprocess.CompletedProcess[str]) -> str:
    line = next(x for x in result.stderr.splitlines() if x.startswith("accel: run "))
    return line.split()[2].rstrip(":")


@pytest.fixture(scope="module")
def clean_weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run's final weights (12 steps): one run per module and process."""
    from accel.workspace import Workspace

    project = tmp_path_factory.mktemp("clean")
    alone = {"HOME": str(project), "XDG_CONFIG_HOME": str(project / ".config")}
    clean = run_helpers.accel(
        project, "launch", "-n", "2", "--run-name", "clean", str(EXAMPLE), *TRAIN,
        "--save-every", "1000", env={**snapshots(1000), **alone}, timeout=150,
    )  # fmt: skip
    assert clean.returncode == 0, clean.stdout + clean.stderr
    state = Workspace(project / ".accelerate").checkpoints.load(series="clean")
    assert state["step"] == 12
    weights: dict[str, Any] = state["models"][0]
    return weights


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("schedule", [[], ["--lr-decay", "0.9"]], ids=["constant", "scheduler"])
def test_persisted_snapshots_hold_the_bytes_a_save_at_that_step_writes(
    accel: Accel, project: Path, schedule: list[str]
) -> None:
    import torch

    from accel.workspace import Workspace

    # The reference counts optimizer steps too (a snapshot never due), and saves at 5, 10.
    # With an LR scheduler stepped after the optimizer, a snapshot closes at the next
    # forward: the scheduler it holds must still be the one of the iteration's end.
    ref = accel(
        "launch", "-n", "2", "--run-name", "ref", str(EXAMPLE), *TRAIN, *schedule,
        "--save-every", "5", env=snapshots(1000), timeout=150,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stdout + ref.stderr
    snap = accel(
        "launch", "-n", "2", "--run-name", "snap", str(EXAMPLE), *TRAIN, *schedule,
        "--save-every", "1000", env=snapshots(1, 5), timeout=150,
    )  # fmt: skip
    assert snap.returncode == 0, snap.stdout + snap.stderr
    expected, got = manifests(project, "ref"), manifests(project, "snap")
    assert sorted(got) == [5, 10, 12]  # 5 and 10 persisted by the launcher, 12 the script's
    ws = Workspace(project / ".accelerate")
    for step in (5, 10, 12):
        if step != 12:
            assert got[step]["tag"] == "snapshot" and expected[step]["tag"] is None
        assert checksums(got[step])[STATE] == checksums(expected[step])[STATE], step
        # Each rank's file: the same bytes but for Python's and numpy's RNG, which nothing
        # seeds in the example (two runs differ there from their first line).
        for rank in (0, 1):
            mine = ws.checkpoints.load_rank_state(step, series="snap", rank=rank)["rng"]
            theirs = ws.checkpoints.load_rank_state(step, series="ref", rank=rank)["rng"]
            assert torch.equal(mine["torch"], theirs["torch"]), (step, rank)
    assert not list(Path("/dev/shm").glob(PREFIX + run_id(snap)))
    assert_no_orphans(run_id(snap))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_crash_persists_the_newest_whole_snapshot_and_the_restart_resumes_from_it(
    accel: Accel, project: Path, clean_weights: dict[str, Any]
) -> None:
    import torch

    from accel.workspace import Workspace

    # Rank 1 raises in its 8th optimizer step: its snapshot of step 7 is its newest.
    crashed = accel(
        "launch", "-n", "2", "--run-name", "crashed", "--max-restarts", "1",
        str(SCRIPTS / "crash_once.py"), str(EXAMPLE), "8", *TRAIN, "--save-every", "1000",
        env=snapshots(1), timeout=150,
    )  # fmt: skip
    assert crashed.returncode == 0, crashed.stdout + crashed.stderr
    assert "saved the snapshot of step 7 as a checkpoint; kept in memory for the restart" in (
        crashed.stderr
    )
    assert "resumed from the checkpoint of step 7" in crashed.stdout
    found = manifests(project, "crashed")
    assert found[7]["tag"] == "failure"

    ws = Workspace(project / ".accelerate")
    b = ws.checkpoints.load(series="crashed")
    assert b["step"] == b["optimizer_steps"] == 12
    for name, tensor in clean_weights.items():
        assert torch.equal(tensor, b["models"][0][name]), name
    assert not list(Path("/dev/shm").glob(PREFIX + run_id(crashed)))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ["step", "write", "both", "persisting", "restore"])
def test_a_sigkilled_rank_costs_at_most_the_steps_since_its_newest_whole_snapshot(
    accel: Accel, project: Path, where: str, clean_weights: dict[str, Any]
) -> None:
    import torch

    from accel.workspace import Workspace

    # Rank 1 is SIGKILLed as its 8th step begins (its snapshot of step 7 may be half
    # written: then 6 is its newest whole one), or while it writes its snapshot of step 7;
    # or both ranks are, at once, as their 8th step begins; or as in "step" while the
    # launcher persists every step; or as in "step", and again while the restart
    # restores the failure's checkpoint (the second restart restores it whole).
    killed = accel(
        "launch", "-n", "2", "--run-name", "killed", "--max-restarts",
        "2" if where == "restore" else "1", str(SCRIPTS / "kill_once.py"),
        "step" if where == "persisting" else where, str(EXAMPLE),
        "7" if where == "write" else "8", *TRAIN, "--save-every", "1000",
        env=snapshots(1, 1 if where == "persisting" else None), timeout=150,
    )  # fmt: skip
    assert killed.returncode == 0, killed.stdout + killed.stderr
    expected = {6} if where == "write" else {6, 7}
    failure = [s for s, m in manifests(project, "killed").items() if m["tag"] == "failure"]
    if where == "persisting" and not failure:
        # The newest whole step was committed every step (tag snapshot, and retention
        # has retired it since): the restart's own line says which it resumed from.
        failure = [
            int(n) for n in re.findall(r"resumed from the checkpoint of step (\d+)", killed.stdout)
        ]
    assert len(failure) == 1 and failure[0] in expected, killed.stderr
    assert f"resumed from the checkpoint of step {failure[0]}" in killed.stdout
    if where == "restore":
        assert "restart 2 of 2" in killed.stderr, killed.stderr

    ws = Workspace(project / ".accelerate")
    b = ws.checkpoints.load(series="killed")
    assert b["step"] == 12
    for name, tensor in clean_weights.items():
        assert torch.equal(tensor, b["models"][0][name]), name
    assert not list(Path("/dev/shm").glob(PREFIX + run_id(killed)))
    assert_no_orphans(run_id(killed))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_run_with_an_lr_scheduler_restarts_from_memory_bit_for_bit(
    accel: Accel, project: Path
) -> None:
    import torch

    from accel.workspace import Workspace

    # The scheduler sets the optimizer's learning rate after its step: a snapshot must
    # hold the rate of the iteration's end, or the restart trains on with the last one.
    decay = ["--lr-decay", "0.8"]
    clean = accel(
        "launch", "-n", "2", "--run-name", "clean", str(EXAMPLE), *TRAIN, *decay,
        "--save-every", "1000", env=snapshots(1000), timeout=150,
    )  # fmt: skip
    assert clean.returncode == 0, clean.stdout + clean.stderr
    killed = accel(
        "launch", "-n", "2", "--run-name", "killed", "--max-restarts", "1",
        str(SCRIPTS / "kill_once.py"), "step", str(EXAMPLE), "8", *TRAIN, *decay,
        "--save-every", "1000", env=snapshots(1), timeout=150,
    )  # fmt: skip
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert re.search(r"resumed from the checkpoint of step [67]\b", killed.stdout)
    ws = Workspace(project / ".accelerate")
    a, b = ws.checkpoints.load(series="clean"), ws.checkpoints.load(series="killed")
    assert a["step"] == b["step"] == 12
    assert a["optimizers"][0]["param_groups"] == b["optimizers"][0]["param_groups"]
    for name, tensor in a["models"][0].items():
        assert torch.equal(tensor, b["models"][0][name]), name
    assert_no_orphans(run_id(killed))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_sigkilled_launcher_leaves_no_tier_and_only_whole_checkpoints(
    start_accel: Callable[..., subprocess.Popen[str]],
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accel.workspace import Workspace

    shm = tmp_path / "shm"
    shm.mkdir()
    for name, value in {**snapshots(1, 2), "ACCEL_SHM_DIR": str(shm)}.items():
        monkeypatch.setenv(name, value)
    proc = start_accel(
        "launch", "-n", "2", "--run-name", "doomed", str(EXAMPLE), "--steps", "1000000",
        "--save-every", "1000000", "--log-every", "1000000",
    )  # fmt: skip
    ws = Workspace(project / ".accelerate")
    wait_for(lambda: len(ws.checkpoints.list(series="doomed")) >= 2, 90, "two persisted steps")
    run = next((project / ".accelerate" / "logs" / "runs").iterdir()).name
    proc.kill()  # SIGKILL: no handler of the launcher's runs, its guard's does
    proc.wait()
    wait_for(lambda: not list(shm.iterdir()), 30, "the guard to remove the memory tier")
    assert_no_orphans(run)
    found = ws.checkpoints.list(series="doomed")
    assert found and all(info.path.name.startswith("step-") for info in found)
    for info in found:  # every checkpoint listed is whole: it loads and verifies
        assert ws.checkpoints.load(info.step, series="doomed")["optimizer_steps"] == info.step


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_stopped_run_persists_its_newest_snapshot_as_stopped_not_failed(
    start_accel: Callable[..., subprocess.Popen[str]],
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a preemption's SIGTERM committed the newest snapshot tagged "failure": nothing failed
    from accel.workspace import Workspace

    for name, value in snapshots(1, 1000).items():
        monkeypatch.setenv(name, value)
    proc = start_accel(
        "launch", "-n", "2", "--run-name", "stop", "--stop-grace-period", "1s", str(EXAMPLE),
        "--steps", "1000000", "--save-every", "1000000", "--log-every", "1",
    )  # fmt: skip
    runs = project / ".accelerate" / "logs" / "runs"

    def at_step_3() -> bool:
        logs = list(runs.glob("*/rank-0.log")) if runs.is_dir() else []
        return bool(logs) and "step     3" in logs[0].read_text()

    wait_for(at_step_3, 90, "step 3")
    proc.terminate()
    assert proc.wait(timeout=60) == 143
    tags = {info.tag for info in Workspace(project / ".accelerate").checkpoints.list(series="stop")}
    assert tags == {"stopped"}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_shared_memory_too_small_says_so_once_and_saves_blocking(
    accel: Accel, project: Path, tmp_path: Path
) -> None:
    with run_helpers.tiny_tmpfs(tmp_path / "shm") as shm:
        result = accel(
            "launch", "-n", "2", "--run-name", "small", str(EXAMPLE), *TRAIN,
            "--save-every", "1000", env={**snapshots(1, 5), "ACCEL_SHM_DIR": str(shm)},
            timeout=150,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        lines = [x for x in result.stderr.splitlines() if "cannot hold the snapshots" in x]
        assert len(lines) == 2, result.stderr  # once per rank, not per step
        assert f"shared memory at {shm}" in lines[0]
        assert "every 5th step is saved to disk, blocking, instead" in lines[0]
        found = manifests(project, "small")
        assert sorted(found) == [5, 10, 12]
        assert all(m["tag"] is None for m in found.values())  # saved by the workers
        assert not list(shm.iterdir())  # the launcher removed its folder


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restart_that_finds_shared_memory_full_says_so_and_resumes_from_the_failure(
    accel: Accel, project: Path, tmp_path: Path, clean_weights: dict[str, Any]
) -> None:
    import torch

    from accel.workspace import Workspace

    # 96 MiB hold the first attempt's tier (three slots and 24 MiB of headroom); rank 1
    # dies as step 8 begins, and before the restart trains, rank 0 fills the tmpfs.
    with run_helpers.tiny_tmpfs(tmp_path / "shm", size="96m") as shm:
        result = accel(
            "launch", "-n", "2", "--run-name", "full", "--max-restarts", "1",
            str(SCRIPTS / "kill_once.py"), "full", str(EXAMPLE), "8", *TRAIN,
            "--save-every", "1000", env={**snapshots(1), "ACCEL_SHM_DIR": str(shm)},
            timeout=150,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        failure = [s for s, m in manifests(project, "full").items() if m["tag"] == "failure"]
        assert len(failure) == 1 and failure[0] in (6, 7), result.stderr
        assert f"resumed from the checkpoint of step {failure[0]}" in result.stdout
        lines = [x for x in result.stderr.splitlines() if "cannot hold the snapshots" in x]
        assert len(lines) == 2, result.stderr  # the restart's ranks, once each
        assert [p.name for p in shm.iterdir()] == ["filler"]  # the tier went with the run
    b = Workspace(project / ".accelerate").checkpoints.load(series="full")
    assert b["step"] == 12
    for name, tensor in clean_weights.items():
        assert torch.equal(tensor, b["models"][0][name]), name
    assert_no_orphans(run_id(result))


def test_a_persist_interval_that_is_no_multiple_of_the_snapshots_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_SNAPSHOT_EVERY", "10")
    monkeypatch.setenv("ACCEL_CHECKPOINTS_PERSIST_EVERY", "15")
    line = refused(capsys, "-n", "1")
    assert "checkpoints.persist_every (15) must be a multiple of" in line
