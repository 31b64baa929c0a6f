"""``accel clean`` on real workspaces: ages, retention, budgets, links, debris, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from clean_factory import DAY, age_tree, checkpoint, entry, run, tree_digest, workspace

from accel import _faults
from accel._fs import remove_tree
from accel.clean import _execute as execute_mod
from accel.clean import clean
from accel.layout import make_owned_dir
from accel.training_log import format_line
from accel.workspace import Workspace


def accel(exe: list[str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*exe, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def names(ws: Workspace) -> set[str]:
    return {p.name for p in (ws.cache_dir / "entries").iterdir()}


def test_age_comes_from_recorded_times_not_mtimes(project: Path) -> None:
    ws, now = workspace(project), time.time()
    entry(ws, "recorded-old", created=now - 10 * DAY)  # files are new, the record is old
    entry(ws, "recorded-new", created=now - 20 * DAY, last_used=now - DAY, mtime=now - 30 * DAY)
    entry(ws, "future", created=now + 5 * DAY, mtime=now + 5 * DAY)
    outcome = clean(ws, older_than="7d")
    assert [p.item.name for p in outcome.plan.items] == ["recorded-old"]
    assert names(ws) == {"recorded-new.entry", "future.entry"}


def test_aged_files_without_recorded_times_go_by_mtime_and_future_mtimes_stay(
    project: Path,
) -> None:
    ws, now = workspace(project), time.time()
    line = format_line("rotated", "info", command="accel clean", now=now - 9 * DAY)
    old_log = ws.logs_dir / "training.log.3"
    old_log.write_text(line)
    os.utime(old_log, (now - 9 * DAY, now - 9 * DAY))
    future_log = ws.logs_dir / "training.log.4"
    future_log.write_text(line)
    os.utime(future_log, (now + 9 * DAY, now + 9 * DAY))
    old_run = ws.runs_dir / "20200101-000000-aaaaaa"
    old_run.mkdir()
    (old_run / "run.json").write_text(json.dumps({"id": old_run.name, "status": "failed"}))
    (old_run / "rank-0.log").write_text("x")
    age_tree(old_run, now - 9 * DAY)
    clean(ws, older_than="7d")
    assert not old_log.exists() and not old_run.exists()
    assert future_log.exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_state_written_at_a_faked_earlier_time_is_old(project: Path) -> None:
    """The store records time.time(): run a writer whose clock is 10 days behind."""
    ws = workspace(project)
    script = (
        "import time, sys\n"
        "real = time.time\n"
        "time.time = lambda: real() - 10 * 86400\n"
        "from accel.workspace import Workspace\n"
        "Workspace(sys.argv[1]).cache.put('faked/old', b'x' * 64)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(ws.path)], check=True, timeout=60)
    ws.cache.put("fresh", b"y" * 64)
    outcome = clean(ws, older_than="7d")
    assert [p.item.name for p in outcome.plan.items] == ["faked/old"]
    assert ws.cache.get("fresh") == b"y" * 64 and ws.cache.get("faked/old") is None


def test_keep_last_keeps_the_newest_steps_of_each_series(project: Path) -> None:
    ws, now = workspace(project), time.time()
    for step in (10, 20, 30, 40):
        checkpoint(ws, "main", step, created=now - step)
    checkpoint(ws, "other", 1, created=now - 99 * DAY)
    clean(ws, keep_last=2)
    assert sorted(p.name for p in (ws.checkpoints_dir / "main").iterdir()) == [
        "step-000000000030",
        "step-000000000040",
    ]
    assert (ws.checkpoints_dir / "other" / "step-000000000001" / "manifest.json").exists()
    clean(ws, keep_last=0)
    assert not (ws.checkpoints_dir / "main").exists()


def test_max_size_evicts_in_lru_order(project: Path) -> None:
    ws, now = workspace(project), time.time()
    for i in range(6):  # e5 is the least recently used
        entry(ws, f"e{i}", size=10_000, created=now - 9 * DAY, last_used=now - i * 3600)
    base = clean(ws, dry_run=True, max_size="1TB").plan.scan.total_size - 60_000
    outcome = clean(ws, max_size=str(base + 35_000))
    assert [p.item.name for p in outcome.plan.items] == ["e5", "e4", "e3"]
    assert names(ws) == {"e0.entry", "e1.entry", "e2.entry"}


def test_a_clean_with_nothing_to_remove_has_a_result(project: Path) -> None:
    # The docs' snippet reads outcome.result.freed_bytes; it is None on a dry run only.
    ws = workspace(project)
    outcome = clean(ws, older_than="7d", keep_last=2)
    assert outcome.plan.items == () and outcome.result is not None
    assert (outcome.result.freed_bytes, outcome.result.removed) == (0, ())
    assert clean(ws, older_than="7d", dry_run=True).result is None


def test_without_selectors_the_configured_retention_applies(project: Path) -> None:
    ws, now = workspace(project), time.time()
    for step in range(1, 6):
        checkpoint(ws, "main", step, created=now)
    clean(ws)  # checkpoints.keep_last defaults to 3
    assert len(list((ws.checkpoints_dir / "main").iterdir())) == 3


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_dry_run_leaves_the_tree_byte_identical(project: Path, accel_exe: list[str]) -> None:
    ws, now = workspace(project), time.time()
    for i in range(5):
        entry(ws, f"e{i}", created=now - 30 * DAY, mtime=now - 30 * DAY)
        checkpoint(ws, "main", i, created=now - 30 * DAY)
    run(ws, "20200101-000000-abcdef", started="2020-01-01T00:00:00+00:00")
    (ws.tmp_dir / "cache-dead").mkdir()
    age_tree(ws.tmp_dir / "cache-dead", now - DAY)
    before = tree_digest(ws.path)
    for args in (["--older-than", "1d"], ["--keep-last", "0"], ["--max-size", "0"], []):
        result = accel(accel_exe, "clean", *args, "--dry-run")
        assert result.returncode == 0, result.stderr
        assert "would free" in result.stdout
        result = accel(accel_exe, "clean", *args, "--dry-run", "--json")
        assert json.loads(result.stdout)["items"]
    assert tree_digest(ws.path) == before


def test_links_are_never_followed_and_never_taken_for_accels(project: Path, tmp_path: Path) -> None:
    ws, now = workspace(project), time.time()
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.bin").write_bytes(b"keep me")
    (outside / "meta.json").write_text("{}")
    folder = entry(ws, "linked", created=now - 30 * DAY)
    (folder / "payload-link").symlink_to(outside)  # inside an entry: not accel's, kept
    (folder / "file-link").symlink_to(outside / "data.bin")
    (ws.cache_dir / "entries" / "ns").mkdir()
    (ws.cache_dir / "entries" / "ns" / "sub").symlink_to(outside)  # a namespace leading out
    (ws.cache_dir / "entries" / "out.entry").symlink_to(outside)  # an "entry" leading out
    (ws.runs_dir / "20200101-000000-linked").symlink_to(outside)
    os.utime(ws.runs_dir / "20200101-000000-linked", (1, 1), follow_symlinks=False)
    outcome = clean(ws, older_than="1d")
    assert outcome.result is not None
    assert [p.item.path for p in outcome.plan.items] == [folder]
    assert outcome.plan.items[0].item.foreign == ("file-link", "payload-link")
    assert sorted(p.name for p in folder.iterdir()) == ["file-link", "payload-link"]
    assert folder.is_dir() and ws.cache.info("linked") is None
    assert all(os.path.islink(p) for p in folder.iterdir())
    # --force removes them, as links: never their targets.
    forced = entry(ws, "forced", created=now - 30 * DAY)
    (forced / "file-link").symlink_to(outside / "data.bin")
    outcome = clean(ws, older_than="1d", force=True)
    assert [p.item.path for p in outcome.plan.items] == [forced]
    assert outcome.result is not None and not outcome.result.skipped, outcome.result
    assert not os.path.lexists(forced) and folder.is_dir()
    left_alone = {k.item.path for k in outcome.plan.kept if k.reason == "unknown, left alone"}
    assert left_alone == {
        folder,  # only the links are left in it: not accel's
        ws.cache_dir / "entries" / "ns" / "sub",
        ws.cache_dir / "entries" / "out.entry",
        ws.runs_dir / "20200101-000000-linked",
    }
    assert all(os.path.islink(p) for p in left_alone - {folder})
    assert sorted(p.name for p in outside.iterdir()) == ["data.bin", "meta.json"]
    assert (outside / "data.bin").read_bytes() == b"keep me"


def test_remove_tree_never_enters_another_filesystem(tmp_path: Path) -> None:
    target = tmp_path / "mounted"
    (target / "inner").mkdir(parents=True)
    (target / "inner" / "f").write_text("x")
    other_device = os.lstat(target).st_dev + 1
    assert remove_tree(target, other_device) == 1
    assert (target / "inner" / "f").exists()


def test_crash_debris_is_collected_after_its_grace_period(project: Path) -> None:
    ws, now = workspace(project), time.time()
    checkpoint(ws, "main", 1, created=now)
    torn = checkpoint(ws, "main", 2, created=now, manifest=False)
    staging = make_owned_dir(ws.checkpoints_dir / "main" / ".tmp-000000000003-0123456789ab")
    (staging / "state.tensors").write_bytes(b"half")
    stage = make_owned_dir(ws.tmp_dir / f"cache-{'0' * 32}")
    (stage / "value.bin").write_bytes(b"half")
    half_put = make_owned_dir(ws.cache_dir / "entries" / "gone.entry", parents=True)
    (half_put / "value.bin").write_bytes(b"z")
    half_deleted = make_owned_dir(ws.runs_dir / ".del-0123456789ab")
    (half_deleted / "rank-0.log").write_text("half")
    temp = ws.cache_dir / "entries" / ".accel-tmp-abcd1234"
    temp.write_text("{")
    fresh = make_owned_dir(ws.tmp_dir / "cache-fresh")
    debris = (torn, staging, stage, half_put, half_deleted, temp)
    for path in debris:
        age_tree(path, now - 3600)
    outcome = clean(ws, keep_last="5")
    assert {p.reason for p in outcome.plan.items} == {"debris"}
    assert {p.item.path for p in outcome.plan.items} == set(debris)
    assert not any(p.exists() for p in debris)
    assert fresh.exists() and (ws.checkpoints_dir / "main" / "step-000000000001").exists()


def test_look_alikes_of_debris_without_accels_marker_are_left_alone(project: Path) -> None:
    ws, now = workspace(project), time.time()
    lookalikes = [
        ws.checkpoints_dir / "main" / ".tmp-000000000003-0123456789ab",
        ws.checkpoints_dir / "main" / "step-000000000004",  # no manifest, no marker
        ws.tmp_dir / f"cache-{'0' * 32}",
        ws.cache_dir / "entries" / "gone.entry",
        ws.runs_dir / "20200101-000000-nojson",
    ]
    for folder in lookalikes:
        folder.mkdir(parents=True)
        (folder / "data.bin").write_bytes(b"theirs")
        age_tree(folder, now - 30 * DAY)
    before = tree_digest(ws.path)
    outcome = clean(ws, older_than="0s", keep_last="0", max_size="0")
    assert outcome.plan.items == ()
    kept = {k.item.path: k.reason for k in outcome.plan.kept}
    assert {p: kept.get(p) for p in lookalikes} == dict.fromkeys(lookalikes, "unknown, left alone")
    assert tree_digest(ws.path) == before


def test_a_clean_killed_mid_removal_leaves_nothing_that_looks_valid(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, now = workspace(project), time.time()
    old = checkpoint(ws, "main", 1, created=now - 9 * DAY, size=1000)
    checkpoint(ws, "main", 2, created=now)
    _faults.set_hook(_interrupt_at("remove.unlinked"))
    try:
        with pytest.raises(KeyboardInterrupt):
            clean(ws, older_than="1d")
    finally:
        _faults.set_hook(None)
    assert not old.exists() and [i.step for i in ws.checkpoints.list("main")] == [2]
    leftover = [p for p in old.parent.iterdir() if p.name.startswith(".del-")]
    assert len(leftover) == 1 and (leftover[0] / ".accel-owned").exists()
    later = clean(ws, older_than="1d", now=time.time() + 3600)  # past the debris grace
    assert [(p.item.path, p.reason) for p in later.plan.items] == [(leftover[0], "debris")]
    assert not leftover[0].exists() and [i.step for i in ws.checkpoints.list("main")] == [2]


def _interrupt_at(name: str) -> Callable[[str], None]:
    def hook(point: str) -> None:
        if point == name:
            raise KeyboardInterrupt

    return hook


@pytest.mark.slow
def test_clean_never_creates_a_workspace(project: Path, accel_exe: list[str]) -> None:
    result = accel(accel_exe, "clean", "--older-than", "1d")
    assert (result.returncode, result.stdout.strip()) == (0, "nothing to clean")
    assert not (project / ".accelerate").exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args",
    [
        ["--older-than", "7x"],
        ["--older-than", "-1d"],
        ["--max-size", "10QB"],
        ["--keep-last", "-1"],
        ["--only", "everything"],
        ["--older-than"],
        ["--keep-last"],
    ],
)
def test_bad_input_exits_2_and_changes_nothing(
    project: Path, accel_exe: list[str], args: list[str]
) -> None:
    ws, now = workspace(project), time.time()
    entry(ws, "old", created=now - 99 * DAY)
    before = tree_digest(ws.path)
    result = accel(accel_exe, "clean", "--yes", *args)
    assert result.returncode == 2, result
    assert "rror" in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert tree_digest(ws.path) == before


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_from_cron_one_line_no_prompt(project: Path, accel_exe: list[str]) -> None:
    ws, now = workspace(project), time.time()
    entry(ws, "old", created=now - 99 * DAY, size=2048)
    for step in range(1, 6):
        checkpoint(ws, "main", step, created=now)
    before = tree_digest(ws.path)
    refused = accel(accel_exe, "clean")  # no selector, no --yes, no terminal
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert tree_digest(ws.path) == before
    done = accel(accel_exe, "clean", "--older-than", "30d")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["freed 2.0 KiB in 1 item(s)"]
    assert "\x1b[" not in done.stdout + done.stderr
    again = accel(accel_exe, "clean", "--older-than", "30d")
    assert (again.returncode, again.stdout) == (0, "nothing to clean\n")
    configured = accel(accel_exe, "clean", "--yes", "--json")
    data = json.loads(configured.stdout)
    assert data["policy"]["keep_last"] == 3 and len(data["removed"]) == 2
    assert data["freed_bytes"] == sum(i["size"] for i in data["items"])
    log = (ws.logs_dir / "training.log").read_text()
    assert "accel clean: clean removed 1 item(s)" in log


@pytest.mark.parametrize(
    ("content", "ok"),
    [
        ('{"a": 1}', True),
        ('  {"a": 1}\n', True),
        ('{"k": "' + "y" * 40000 + '"}', True),
        ('{"k": "' + "y" * 16375 + '"}', True),
        ('{"a": 1} x', False),
        ("", False),
        ('{"a":', False),
    ],
)
def test_the_fast_json_reader_reads_what_json_reads(tmp_path: Path, content: str, ok: bool) -> None:
    from accel.clean._walk import read_json as _read_json

    path = tmp_path / "meta.json"
    path.write_text(content)
    if ok:
        assert _read_json(str(path)) == json.loads(content)
    else:
        with pytest.raises(ValueError):
            _read_json(str(path))


def test_an_unreadable_meta_is_a_warning_not_a_crash(project: Path) -> None:
    ws, now = workspace(project), time.time()
    broken = entry(ws, "broken", created=now - 99 * DAY)
    (broken / "meta.json").write_text("{not json")
    outcome = clean(ws, older_than="1d")
    assert outcome.plan.items == () and "unreadable meta.json" in outcome.plan.warnings[0]
    assert broken.exists()


@pytest.mark.parametrize(("answer", "code"), [(False, 1), (True, 0)])
def test_on_a_terminal_it_asks_first(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: bool,
    code: int,
) -> None:
    from accel.cli import clean as clean_cli
    from accel.cli.main import main

    ws, now = workspace(project), time.time()
    old = entry(ws, "old", created=now - 99 * DAY)
    asked: list[str] = []
    monkeypatch.setattr(clean_cli, "_interactive", lambda: True)
    monkeypatch.setattr(clean_cli._output, "confirm", lambda text: asked.append(text) or answer)
    assert main(["clean", "--older-than", "1d"]) == code
    assert asked == ["Remove 1 item(s)?"] and "To remove" in capsys.readouterr().out
    assert old.exists() is not answer


def test_an_item_on_another_filesystem_is_left_whole(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, now = workspace(project), time.time()
    mounted = entry(ws, "mounted", created=now - 99 * DAY)
    real_lstat = os.lstat

    def lstat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        st = real_lstat(path, *args, **kwargs)  # type: ignore[arg-type]
        if str(path) == str(mounted):  # as if a filesystem were mounted there
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev + 1, *st[3:]))
        return st

    monkeypatch.setattr(execute_mod.os, "lstat", lstat)
    outcome = clean(ws, older_than="1d")
    assert outcome.result is not None
    assert [(s.path, s.reason) for s in outcome.result.skipped] == [
        (mounted, "on another filesystem")
    ]
    assert (mounted / "meta.json").exists()


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((), "beyond checkpoints.keep_last"),  # the project file's retention
        (("--keep-last", "3"), "beyond --keep-last"),
    ],
)
def test_the_plan_names_the_limit_that_applies(
    project: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], why: str
) -> None:
    from accel.cli.main import main

    ws, now = workspace(project), time.time()
    for step in range(1, 6):
        checkpoint(ws, "main", step, created=now)
    assert main(["clean", "--dry-run", *args]) == 0
    out = capsys.readouterr().out
    assert out.count(why) == 2 and "--keep-last" not in out.replace(why, "")


def test_a_removed_run_takes_its_lock_and_a_live_runs_lock_stays(project: Path) -> None:
    # locks/ kept one run-<id>.lock for every run ever made, and every command that
    # asks which runs are live probes each of them.
    from accel.runs import run_lock, run_lock_path

    ws = workspace(project)
    for run_id in ("20260101-000000-aaaaaa", "20260102-000000-bbbbbb"):
        folder = run(
            ws, run_id, started="2026-01-01T00:00:00+00:00", ended="2026-01-01T01:00:00+00:00"
        )
        with run_lock(ws.layout, run_id):  # as its launcher held it
            pass
        age_tree(folder, time.time() - 30 * DAY)
    old, live = "20260101-000000-aaaaaa", "20260102-000000-bbbbbb"
    with run_lock(ws.layout, live):  # a launcher still holds this one: never removed
        result = clean(ws, only=["runs"], older_than=DAY).result
    assert result is not None and [p.item.run_id for p in result.removed] == [old]
    assert not run_lock_path(ws.layout, old).exists()
    assert run_lock_path(ws.layout, live).exists() and (ws.runs_dir / live).is_dir()


def test_a_clean_drops_the_locks_older_accels_left_of_removed_runs(project: Path) -> None:
    # Runs removed before a run's lock went with it left run-<id>.lock behind for good.
    # A clean that removes something drops such a lock only when it is a day old, a plain
    # file, held by nobody and its run folder is gone: a missing lock and a free one both
    # read as "not live".
    from accel.runs import run_lock, run_lock_path

    ws = workspace(project)
    now = time.time()
    ws.layout.locks_dir.mkdir(parents=True, exist_ok=True)

    def lock(run_id: str, age: float) -> Path:
        path = run_lock_path(ws.layout, run_id)
        path.touch()
        os.utime(path, (now - age, now - age))
        return path

    orphan = lock("20250101-000000-aaaaaa", 2 * DAY)
    new = lock("20250101-000000-bbbbbb", 60)  # a launcher may be about to take it
    held = lock("20250101-000000-cccccc", 2 * DAY)
    kept_run, old_run = "20250101-000000-dddddd", "20240101-000000-ffffff"
    recent = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
    run(ws, kept_run, started=recent, ended=recent)
    has_folder = lock(kept_run, 2 * DAY)
    linked = run_lock_path(ws.layout, "20250101-000000-eeeeee")
    linked.symlink_to(orphan.parent / "elsewhere.lock")
    # something for the clean to remove
    folder = run(
        ws, old_run, started="2024-01-01T00:00:00+00:00", ended="2024-01-01T01:00:00+00:00"
    )
    age_tree(folder, now - 30 * DAY)
    with run_lock(ws.layout, "20250101-000000-cccccc"):  # a launcher holds it
        result = clean(ws, only=["runs"], older_than=DAY).result
    assert result is not None and [p.item.run_id for p in result.removed] == [old_run]
    assert not orphan.exists()
    assert new.exists() and held.exists() and has_folder.exists() and linked.is_symlink()


def test_a_write_killed_in_the_config_or_locks_folder_leaves_debris_clean_collects(
    project: Path,
) -> None:
    # a `config set` killed between its temp file and the rename, or a run killed while
    # it rewrote its lease record in locks/, left `.accel-tmp-*` there for good: clean
    # counted both folders whole and never looked inside
    ws, now = workspace(project), time.time()
    ws.ensure()
    temps = [ws.path / "config" / ".accel-tmp-k1l2m3n4", ws.locks_dir / ".accel-tmp-abcdefgh"]
    fresh = ws.locks_dir / ".accel-tmp-freshnow"  # a write under way: within the grace
    for path in (*temps, fresh):
        path.write_text("{")
    for path in temps:
        age_tree(path, now - 3600)
    theirs = ws.path / "config" / "notes.txt"  # the user's: the config folder stays theirs
    theirs.write_text("mine")
    age_tree(theirs, now - 30 * DAY)
    outcome = clean(ws)
    assert {p.item.path: p.reason for p in outcome.plan.items} == dict.fromkeys(temps, "debris")
    assert not any(p.exists() for p in temps)
    assert fresh.exists() and theirs.exists() and (ws.path / "config").is_dir()
