"""Elastic jobs (torchrun's ``--nnodes MIN:MAX``), with real launchers on loopback: the
job starts with the nodes it has, and grows when a node joins."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS

from run_helpers import Start, free_port

# Leans on torch's internals: the tests marked `edge` also run on the oldest and the
# newest torch (.ci/run), one case per journey; the rest run on the default.

# Short waits: for more nodes once MIN are in (torch: 30 s), and for the messages.
FAST = {"ACCEL_RDZV_LAST_CALL": "1", "ACCEL_RDZV_REPORT_INTERVAL": "1"}
GROW = str(SCRIPTS / "elastic_grow.py")


@pytest.fixture
def node(start_accel: Start, monkeypatch: pytest.MonkeyPatch) -> Start:
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    return lambda *args: start_accel("launch", *args)


@pytest.fixture
def out(project: Path) -> Path:
    """Where each worker start writes what world it got."""
    (project / "out").mkdir()
    return project / "out"


@pytest.fixture
def endpoint() -> str:
    return f"127.0.0.1:{free_port()}"


def starts(out: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(out.glob("start-*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except json.JSONDecodeError:  # being written
            continue
    return found


def records(project: Path) -> dict[int, dict[str, Any]]:
    runs = project / ".accelerate" / "logs" / "runs"
    found = [json.loads((d / "run.json").read_text()) for d in runs.iterdir()]
    return {r["node_rank"]: r for r in found}


def elastic(rank: int, endpoint: str, *args: str) -> tuple[str, ...]:
    return ("--nnodes", "1:2", "--node-rank", str(rank), "--rdzv-endpoint", endpoint, *args)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_elastic_job_starts_with_the_nodes_it_has(
    node: Start, project: Path, out: Path, endpoint: str
) -> None:
    alone = node(*elastic(0, endpoint, "-n", "2", GROW, str(out), "2"))
    _, err = alone.communicate(timeout=80)
    assert alone.returncode == 0, err
    assert sorted((s["rank"], s["world"]) for s in starts(out)) == [(0, 2), (1, 2)]
    assert "2 to 4 worker(s)" in err and "1 node(s) joined: 2 worker(s) in all" in err
    record = records(project)[0]
    assert (record["min_nnodes"], record["nnodes"], record["world_size"]) == (1, 1, 2)
    assert [(a["nnodes"], a["world_size"]) for a in record["attempts"]] == [(1, 2)]


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_node_that_joins_grows_the_job(
    node: Start, project: Path, out: Path, endpoint: str
) -> None:
    first = node(*elastic(0, endpoint, "-n", "1", GROW, str(out), "2"))
    deadline = time.monotonic() + 60
    while not starts(out):  # node 0 runs alone: a world of 1
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    assert [s["world"] for s in starts(out)] == [1]
    second = node(*elastic(1, endpoint, "-n", "1", GROW, str(out), "2"))
    outputs = [proc.communicate(timeout=100) for proc in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    grown = sorted((s["rank"], s["world"], s["all_reduce"]) for s in starts(out) if s["world"] == 2)
    assert grown == [(0, 2, 3.0), (1, 2, 3.0)]
    # the restart for a joining node is not a failure and not counted as one
    assert {s["restart"] for s in starts(out)} == {"0"}
    assert "the job now has 2 node(s): restarted the workers with 2 in all" in outputs[0][1]
    node0 = records(project)[0]
    assert node0["status"] == "succeeded" and node0["restarts"] == 0
    # Each start of node 0's workers: alone, then with node 1. Beside other work a round
    # can close with node 0 alone once more (node 1 joined torch's wait list, then came
    # later than the round's last call; the 2.15 block of a local CI run): a start of
    # world 1 again, still attempt 0, before the grown one.
    started = [(a["attempt"], a["world_size"]) for a in node0["attempts"]]
    assert started[0] == (0, 1) and started[-1] == (0, 2), (started, outputs)
    assert set(started) == {(0, 1), (0, 2)}, (started, outputs)
    assert node0["world_size"] == 2 and node0["nnodes"] == 2 and node0["failed_rank"] is None
    assert not any(a.get("failures") for a in node0["attempts"])


@pytest.mark.edge
@pytest.mark.slow
@pytest.mark.timeout(300)  # the one bound: every wait below is on an event
def test_a_node_that_dies_shrinks_the_job_on_restart(
    node: Start, project: Path, out: Path, endpoint: str
) -> None:
    hold = str(SCRIPTS / "elastic_hold.py")
    first = node(*elastic(0, endpoint, "--max-restarts", "1", "-n", "1", hold, str(out)))
    second = node(*elastic(1, endpoint, "--max-restarts", "1", "-n", "1", hold, str(out)))
    # No deadline of its own: on a loaded machine the world of 2 forms when it forms (it
    # missed a 60 s deadline beside CPU hogs); a launcher that died is the failure to see.
    while not any(s["world"] == 2 for s in starts(out)):
        assert first.poll() is None and second.poll() is None, first.communicate()
        time.sleep(0.2)
    second.kill()  # node 1 is lost: its launcher dies at once, its guard ends its worker
    second.wait()
    _, err = first.communicate()
    assert first.returncode == 0, err
    assert "restarting the workers (restart 1 of 1)" in err
    after = [s for s in starts(out) if s["restart"] == 1]
    assert [(s["rank"], s["world"]) for s in after] == [(0, 1)]
    node0 = records(project)[0]
    assert node0["status"] == "succeeded" and node0["restarts"] == 1
    assert (node0["nnodes"], node0["world_size"]) == (1, 1)


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_torchruns_elastic_line_without_node_ranks_makes_one_job(
    node: Start, project: Path, out: Path, endpoint: str
) -> None:
    # torchrun's documented elastic line has no --node_rank: each node would host a
    # store of its own and, with MIN 1, train alone. torch picks the host, as there.
    line = ("--nnodes=1:2", "--nproc-per-node=1", f"--rdzv-endpoint={endpoint}")
    nodes = [node(*line, "--rdzv-id=exp7", GROW, str(out), "2") for _ in range(2)]
    outputs = [proc.communicate(timeout=100) for proc in nodes]
    assert [proc.returncode for proc in nodes] == [0, 0], outputs
    grown = sorted((s["rank"], s["world"], s["all_reduce"]) for s in starts(out) if s["world"] == 2)
    assert grown == [(0, 2, 3.0), (1, 2, 3.0)]


WHO = """
import json, os, sys
with open(os.path.join(sys.argv[1], f"start-{os.getpid()}.json"), "w") as fh:
    json.dump({"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"]),
               "node": int(os.environ["GROUP_RANK"])}, fh)
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_record_keeps_the_node_rank_the_rendezvous_gave(
    node: Start, project: Path, out: Path, endpoint: str
) -> None:
    # --node-rank picks the node that hosts the store; c10d numbers the nodes itself (by
    # host name, then pid: on one host the first started is node 0). The record said
    # node_rank 0 of the node whose workers were ranks 1.
    (project / "who.py").write_text(WHO)
    static = ("--nnodes", "2", "--rdzv-endpoint", endpoint, "-n", "1", "who.py", str(out))
    asked_one = node("--node-rank", "1", *static)  # started first: the lower pid
    asked_zero = node("--node-rank", "0", *static)
    outputs = [proc.communicate(timeout=120) for proc in (asked_one, asked_zero)]
    assert [asked_one.returncode, asked_zero.returncode] == [0, 0], outputs
    assert sorted((s["node"], s["rank"]) for s in starts(out)) == [(0, 0), (1, 1)]
    by_node = records(project)
    assert [a["node_rank"] for a in by_node[0]["attempts"]] == [0]
    assert [a["node_rank"] for a in by_node[1]["attempts"]] == [1]
    said = "accel: the rendezvous made this node 0 of 2 (--node-rank 1 asked; c10d numbers"
    assert said in outputs[0][1] and "global rank(s) 0 run here" in outputs[0][1]
    assert "the rendezvous made this node 1 of 2 (--node-rank 0 asked" in outputs[1][1]
    assert all(r["world_size"] == 2 and r["nnodes"] == 2 for r in by_node.values())


HOLD_UNTIL_RELEASED = """
import os, sys, time
out = sys.argv[1]
open(os.path.join(out, f"start-{os.getpid()}.json"), "w").write("{}")
for _ in range(1200):  # the test releases it; a bound, not a wait for a quiet machine
    if os.path.exists(os.path.join(out, "release")):
        sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_spare_node_says_it_waits_and_ends_with_the_job_it_was_never_needed_by(
    node: Start, project: Path, out: Path, endpoint: str
) -> None:
    # torchrun's elastic spares: a node past --nnodes MAX waits in torch's redundancy
    # list. It was told "starting unless more join soon" while it waited, then, when the
    # job ended, lost the store with the node that hosted it: "lost the rendezvous",
    # exit 1 (or, polling in time, a record "succeeded" saying nothing ran).
    (project / "hold.py").write_text(HOLD_UNTIL_RELEASED)
    job = [node(*elastic(rank, endpoint, "-n", "1", "hold.py", str(out))) for rank in (0, 1)]
    while len(list(out.glob("start-*.json"))) < 2:
        assert all(proc.poll() is None for proc in job), [p.communicate() for p in job]
        time.sleep(0.1)
    spare = node(*elastic(1, endpoint, "-n", "1", "hold.py", str(out)))
    assert spare.stderr is not None
    said = [spare.stderr.readline()]
    while not any(w in said[-1] for w in ("as a spare", "join soon")) and said[-1]:
        said.append(spare.stderr.readline())
    assert "this node waits as a spare and joins when one leaves" in said[-1], said
    (out / "release").touch()
    ends = [proc.communicate(timeout=100) for proc in job]
    assert [proc.returncode for proc in job] == [0, 0], ends
    assert all("accel: telling 1 spare node(s) that the job ended" in e for _, e in ends)
    _, err = spare.communicate(timeout=60)
    assert spare.returncode == 0, [*said, err]
    assert "the job ended before this spare node was needed; no worker ran here" in err
    assert len(list(out.glob("start-*.json"))) == 2  # nothing started on the spare
    run_id = said[0].split()[2].rstrip(":")
    record = json.loads((project / ".accelerate/logs/runs" / run_id / "run.json").read_text())
    assert record["status"] == "succeeded" and record["attempts"] == [] and record["spare"]
