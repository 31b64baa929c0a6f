"""Run records at scale: the commands read the records they show, and the heal of crashed
runs reads only the records no launcher noted final (``runs.note_settled``, which
``accel launch`` calls at the end of its run), however many runs a workspace keeps.
Reads are counted at ``os.open`` (every reader of run.json goes through it), never timed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import run_helpers
from accel import runs
from accel.cli.main import main
from accel.workspace import Workspace

KEPT = 45  # finished runs in the workspace: more than `accel runs` shows by default


def run_id(i: int) -> str:
    return f"20261129-{10 + i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:06x}"


IDS = [run_id(i) for i in range(KEPT)]  # oldest first
NEWEST = IDS[::-1]


@pytest.fixture
def ws(project: Path) -> Workspace:
    """A workspace holding KEPT finished runs."""
    made = Workspace(project / ".accelerate").ensure()
    for i in IDS:
        run_helpers.write_run(made, i, {})
    return made


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Run ids whose run.json was opened (any reader), counted from now on."""
    seen: Counter[str] = Counter()
    real = os.open

    def spy(path: object, *args: object, **kwargs: object) -> int:
        name = os.fsdecode(path)  # type: ignore[arg-type]
        if os.path.basename(name) == "run.json":
            seen[os.path.basename(os.path.dirname(name))] += 1
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", spy)
    return seen


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def running(ws: Workspace, rid: str) -> Path:
    """A record a launcher left saying "running" (its lock file made, and free)."""
    folder = runs.run_dir(ws.layout, rid)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"id": rid, "status": "running", "started_at": "2026-11-29T10:00:00+00:00"}
    (folder / "run.json").write_text(json.dumps(record))
    (folder / "rank-0.log").write_text("last words\n")
    ws.lock_path(f"run-{rid}").touch()
    return folder


def status_of(folder: Path) -> str:
    return str(json.loads((folder / "run.json").read_text())["status"])


def noted(ws: Workspace) -> dict[str, int]:
    settled: dict[str, int] = json.loads(ws.layout.settled_runs_file.read_text())["settled"]
    return settled


def digest(folder: Path) -> str:
    """Names, sizes, mtimes and contents of everything under ``folder``."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        h.update(f"{path}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        if path.is_file() and not path.is_symlink():
            h.update(path.read_bytes())
    return h.hexdigest()


# -- accel runs reads what it shows ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "shown"),
    [((), 20), (("--json",), 20), (("--limit", "5"), 5), (("-l", "0"), KEPT)],
    ids=["default", "json", "limit", "all"],
)
def test_accel_runs_reads_only_the_records_it_shows(
    ws: Workspace,
    opened: Counter[str],
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    shown: int,
) -> None:
    runs.note_settled(ws.layout)  # as the last launch did
    opened.clear()
    out, _ = cli(capsys, "runs", *args)
    assert opened == Counter(NEWEST[:shown])  # each shown record once, no other
    if args == ("--json",):
        assert [r["id"] for r in json.loads(out)] == NEWEST[:shown]
    else:
        listed = [line.split()[0] for line in out.splitlines()[1:]]
        assert listed == NEWEST[:shown]


def test_a_damaged_record_is_reported_as_before_and_the_rest_are_not_read(
    ws: Workspace, opened: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    shown_bad, unseen_bad = NEWEST[2], NEWEST[30]  # one among the newest 20, one beyond
    for rid in (shown_bad, unseen_bad):
        (runs.run_dir(ws.layout, rid) / "run.json").write_text("{not json")
    runs.note_settled(ws.layout)
    opened.clear()
    out, err = cli(capsys, "runs")
    assert f"warning: run {shown_bad}: " in err and "is not valid JSON" in err
    assert unseen_bad not in err + out  # beyond the limit: neither shown nor warned of
    row = next(line for line in out.splitlines() if line.startswith(shown_bad))
    assert "unreadable" in row and "crashed" not in row
    assert opened[unseen_bad] == 0
    assert set(opened) - {shown_bad, unseen_bad} == set(NEWEST[:20]) - {shown_bad}


# -- the heal reads only what no launcher noted final -------------------------------------


def test_an_older_workspace_is_read_whole_until_a_launch_notes_its_runs(
    ws: Workspace, opened: Counter[str]
) -> None:
    dead = running(ws, NEWEST[7])  # an older accel's workspace: no index of settled runs
    assert runs.mark_crashed(ws.layout) == [NEWEST[7]]
    assert status_of(dead) == "crashed"
    assert set(opened) == set(IDS)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter(IDS)  # as before
    runs.note_settled(ws.layout)  # the end of the first launch of this accel
    assert noted(ws).keys() == set(IDS)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter()


@pytest.mark.parametrize(
    "command", [("runs",), ("runs", "show"), ("status",), ("env",), ("clean", "--dry-run")]
)
def test_a_run_ended_since_the_last_launch_is_read_and_no_command_writes_the_index(
    ws: Workspace,
    opened: Counter[str],
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
) -> None:
    runs.note_settled(ws.layout)
    later = run_id(KEPT)
    run_helpers.write_run(ws, later, {})  # pulled, or its launcher died after its last write
    before = digest(ws.path)
    for _ in range(2):
        opened.clear()
        assert runs.mark_crashed(ws.layout) == []
        assert opened == Counter({later: 1})
        cli(capsys, *command)
    assert digest(ws.path) == before  # the index included: only a launcher writes it
    runs.note_settled(ws.layout)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter()


def test_runs_show_reads_only_the_run_it_shows(
    ws: Workspace, opened: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    runs.note_settled(ws.layout)
    opened.clear()
    out, _ = cli(capsys, "runs", "show", NEWEST[3])
    assert f"run {NEWEST[3]}" in out
    assert set(opened) == {NEWEST[3]}


def test_a_new_run_left_running_is_read_and_healed(
    ws: Workspace, opened: Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    runs.note_settled(ws.layout)
    opened.clear()
    dead = running(ws, run_id(KEPT))  # SIGKILLed: it never noted itself
    _, err = cli(capsys, "runs", "--limit", "1")
    assert f"accel: run {run_id(KEPT)} was left running by a launcher that is gone" in err
    assert status_of(dead) == "crashed"
    assert set(opened) == {run_id(KEPT)}
    runs.note_settled(ws.layout)  # the next launch's end
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter()


def test_a_live_run_is_read_until_its_launcher_is_gone_then_healed(
    ws: Workspace, opened: Counter[str]
) -> None:
    runs.note_settled(ws.layout)
    live = run_id(KEPT)
    folder = running(ws, live)
    with runs.run_lock(ws.layout, live):
        runs.note_settled(ws.layout)  # another launcher ends meanwhile
        assert live not in noted(ws)
        for _ in range(2):
            opened.clear()
            assert runs.mark_crashed(ws.layout) == []
            assert set(opened) == {live}  # read every time: it may still say anything
        assert status_of(folder) == "running"
    runs.note_settled(ws.layout)  # the lock is free, but its record says "running"
    assert live not in noted(ws)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [live]
    assert status_of(folder) == "crashed" and set(opened) == {live}
    runs.note_settled(ws.layout)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter()


def test_a_run_that_hung_is_noted_only_once_its_launcher_is_gone(
    ws: Workspace, opened: Counter[str]
) -> None:
    rid = run_id(KEPT)
    run_helpers.write_run(ws, rid, {"status": "hung", "ended_at": None})
    with runs.run_lock(ws.layout, rid):  # "hung" while a hang lasts: it may run again
        runs.note_settled(ws.layout)
        assert rid not in noted(ws)
        opened.clear()
        runs.mark_crashed(ws.layout)
        assert opened == Counter({rid: 1})
    runs.note_settled(ws.layout)  # gone: "hung" is its last word
    assert rid in noted(ws)
    opened.clear()
    runs.mark_crashed(ws.layout)
    assert opened == Counter()


def test_a_folder_put_in_place_of_a_noted_run_is_read(
    ws: Workspace, opened: Counter[str], tmp_path: Path
) -> None:
    runs.note_settled(ws.layout)
    rid = NEWEST[5]
    old = runs.run_dir(ws.layout, rid)
    os.rename(old, tmp_path / "aside")  # kept: the new folder cannot reuse its inode
    restored = running(ws, rid)  # a copy taken while it ran, restored (or pulled) under its name
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [rid]
    assert status_of(restored) == "crashed" and set(opened) == {rid}


def test_a_folder_whose_record_comes_later_is_read_until_it_does(
    ws: Workspace, opened: Counter[str]
) -> None:
    rid = run_id(KEPT)
    runs.run_dir(ws.layout, rid).mkdir()  # a launcher killed before its first write
    runs.note_settled(ws.layout)
    assert rid not in noted(ws)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter({rid: 1})
    running(ws, rid)  # its record comes later (a pull adds what a run folder lacks)
    assert runs.mark_crashed(ws.layout) == [rid]


def test_runs_removed_leave_the_index_at_the_next_note(ws: Workspace, opened: Counter[str]) -> None:
    runs.note_settled(ws.layout)
    for rid in NEWEST[:10]:
        shutil.rmtree(runs.run_dir(ws.layout, rid))
    runs.note_settled(ws.layout)
    assert sorted(noted(ws)) == IDS[: KEPT - 10]
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter()


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link(path: Path) -> None:
    target = path.parent.parent.parent / "elsewhere.json"  # the project folder
    target.write_text('{"keep": "me"}')
    path.symlink_to(target)


def _another_folder(path: Path) -> None:
    doc = json.loads(path.read_text())
    doc["runs"] = [doc["runs"][0], doc["runs"][1] + 1]  # a logs/runs since replaced
    path.write_text(json.dumps(doc))


def _all_settled_as_strings(path: Path) -> None:
    doc = json.loads(path.read_text())
    doc["settled"] = {k: str(v) for k, v in doc["settled"].items()}
    path.write_text(json.dumps(doc))


def _folder(path: Path) -> None:
    path.mkdir()


DAMAGE: dict[str, Callable[[Path], object]] = {
    "not-json": lambda p: p.write_text("{"),
    "deep": lambda p: p.write_text("[" * 100_000),
    "list": lambda p: p.write_text("[]"),
    "newer": lambda p: p.write_text(json.dumps({"version": 2, "runs": [], "settled": {}})),
    "strings": _all_settled_as_strings,
    "another-folder": _another_folder,
    "fifo": _fifo,
    "link": _link,
    "folder": _folder,  # cannot be replaced: every heal reads every record, as before
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_index_costs_full_reads_until_it_is_noted_again(
    ws: Workspace, opened: Counter[str], damage: str
) -> None:
    runs.note_settled(ws.layout)
    index = ws.layout.settled_runs_file
    assert index.is_file()
    if damage in ("fifo", "link", "folder"):
        index.unlink()
    DAMAGE[damage](index)
    rid = run_id(KEPT)
    folder = running(ws, rid)
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [rid]
    assert status_of(folder) == "crashed" and set(opened) == {*IDS, rid}
    runs.note_settled(ws.layout)
    if damage == "link":
        assert (ws.path.parent / "elsewhere.json").read_text() == '{"keep": "me"}'
    opened.clear()
    assert runs.mark_crashed(ws.layout) == []
    if damage == "folder":
        assert index.is_dir() and set(opened) == {*IDS, rid}
    else:
        assert not index.is_symlink() and index.is_file() and opened == Counter()


# -- real launchers: one that ends, one SIGKILLed -------------------------------------------

SCRIPT = """\
import os, pathlib, sys, time
pathlib.Path(sys.argv[1] + ".tmp").write_text(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # whole once it is there
if sys.argv[2:] == ["sleep"]:
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_launch_notes_its_run_and_a_sigkilled_one_is_healed_and_read(
    ws: Workspace,
    project: Path,
    accel: run_helpers.Accel,
    start_accel: run_helpers.Start,
    opened: Counter[str],
) -> None:
    script = project / "script.py"
    script.write_text(SCRIPT)
    done = accel("launch", "-n", "1", str(script), str(project / "first"))
    assert done.returncode == 0, done.stderr
    (first,) = {p.name for p in ws.runs_dir.iterdir()} - set(IDS)
    assert noted(ws).keys() == {*IDS, first}  # the launcher noted every final record
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and opened == Counter()

    ready = project / "ready"
    proc = start_accel("launch", "-n", "1", str(script), str(ready), "sleep")
    run_helpers.wait_for(ready.exists, 90, "the worker to start")
    (killed,) = {p.name for p in ws.runs_dir.iterdir()} - {*IDS, first}
    opened.clear()
    assert runs.mark_crashed(ws.layout) == []  # live: read, never marked
    assert set(opened) == {killed}
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    worker = int(ready.read_text())
    run_helpers.wait_for(lambda: not _alive(worker), 30, "the guard to end the worker")
    listed = accel("runs", "--json", "--limit", "3")
    assert listed.returncode == 0, listed.stderr
    assert f"accel: run {killed} was left running by a launcher that is gone" in listed.stderr
    assert json.loads(listed.stdout)[0]["status"] == "crashed"
    assert status_of(runs.run_dir(ws.layout, killed)) == "crashed"
    assert killed not in noted(ws)  # a SIGKILLed launcher notes nothing
    opened.clear()
    assert runs.mark_crashed(ws.layout) == [] and set(opened) == {killed}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
