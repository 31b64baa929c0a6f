"""``accel clean`` on real workspaces: ages, retention, budgets, links, debris, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clean_factory import DAY, age_tree, checkpoint, entry, run, tree_digest, workspace

from accel.clean import _execute as execute_mod
from accel.clean import clean
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


def test_aged_files_without_records_go_by_mtime_and_future_mtimes_stay(project: Path) -> None:
    ws, now = workspace(project), time.time()
    old_log = ws.logs_dir / "training.log.3"
    old_log.write_text("old\n")
    os.utime(old_log, (now - 9 * DAY, now - 9 * DAY))
    future_log = ws.logs_dir / "training.log.4"
    future_log.write_text("future\n")
    os.utime(future_log, (now + 9 * DAY, now + 9 * DAY))
    old_run = ws.runs_dir / "20200101-000000-aaaaaa"
    old_run.mkdir()
    (old_run / "rank-0.log").write_text("x")
    age_tree(old_run, now - 9 * DAY)
    clean(ws, older_than="7d")
    assert not old_log.exists() and not old_run.exists()
    assert future_log.exists()


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


def test_a_symlink_to_outside_data_is_removed_as_a_link_only(project: Path, tmp_path: Path) -> None:
    ws, now = workspace(project), time.time()
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data.bin").write_bytes(b"keep me")
    folder = entry(ws, "linked", created=now - 30 * DAY)
    (folder / "payload-link").symlink_to(outside)
    (folder / "file-link").symlink_to(outside / "data.bin")
    (ws.cache_dir / "entries" / "ns").mkdir()
    (ws.cache_dir / "entries" / "ns" / "sub").symlink_to(outside)  # a namespace leading out
    (ws.runs_dir / "20200101-000000-linked").symlink_to(outside)
    os.utime(ws.runs_dir / "20200101-000000-linked", (1, 1), follow_symlinks=False)
    outcome = clean(ws, older_than="1d")
    assert outcome.result is not None
    assert not folder.exists() and not (ws.runs_dir / "20200101-000000-linked").exists()
    assert (outside / "data.bin").read_bytes() == b"keep me"
    assert sorted(p.name for p in outside.iterdir()) == ["data.bin"]


def test_remove_tree_never_enters_another_filesystem(tmp_path: Path) -> None:
    target = tmp_path / "mounted"
    (target / "inner").mkdir(parents=True)
    (target / "inner" / "f").write_text("x")
    other_device = os.lstat(target).st_dev + 1
    assert execute_mod.remove_tree(target, other_device) == 1
    assert (target / "inner" / "f").exists()


def test_crash_debris_is_collected_after_its_grace_period(project: Path) -> None:
    ws, now = workspace(project), time.time()
    checkpoint(ws, "main", 1, created=now)
    torn = checkpoint(ws, "main", 2, created=now, manifest=False)
    staging = ws.checkpoints_dir / "main" / ".tmp-save-1"
    staging.mkdir()
    (staging / "model.pt").write_bytes(b"half")
    stage = ws.tmp_dir / "cache-0123"
    stage.mkdir()
    (stage / "value.bin").write_bytes(b"half")
    half_deleted = ws.cache_dir / "entries" / "gone.entry"
    half_deleted.mkdir(parents=True)
    (half_deleted / "value.bin").write_bytes(b"z")
    fresh = ws.tmp_dir / "cache-fresh"
    fresh.mkdir()
    for path in (torn, staging, stage, half_deleted):
        age_tree(path, now - 3600)
    outcome = clean(ws, keep_last="5")
    assert {p.reason for p in outcome.plan.items} == {"debris"}
    assert not any(p.exists() for p in (torn, staging, stage, half_deleted))
    assert fresh.exists() and (ws.checkpoints_dir / "main" / "step-000000000001").exists()


def test_a_checkpoint_interrupted_mid_removal_is_never_valid(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, now = workspace(project), time.time()
    old = checkpoint(ws, "main", 1, created=now - 9 * DAY)
    checkpoint(ws, "main", 2, created=now)
    monkeypatch.setattr(execute_mod.os, "rename", _fail_rename)
    monkeypatch.setattr(execute_mod, "remove_tree", _crash)
    with pytest.raises(KeyboardInterrupt):
        clean(ws, older_than="1d")
    monkeypatch.undo()
    assert old.exists() and not (old / "manifest.json").exists()
    later = clean(ws, older_than="1d", now=time.time() + 3600)  # past the debris grace
    assert [(p.item.path, p.reason) for p in later.plan.items] == [(old, "debris")]
    assert not old.exists()


def _fail_rename(src: object, dst: object) -> None:
    raise OSError(18, "Invalid cross-device link")


def _crash(path: object, device: int) -> int:
    raise KeyboardInterrupt


def test_clean_never_creates_a_workspace(project: Path, accel_exe: list[str]) -> None:
    result = accel(accel_exe, "clean", "--older-than", "1d")
    assert (result.returncode, result.stdout.strip()) == (0, "nothing to clean")
    assert not (project / ".accelerate").exists()


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
    from accel.clean._scan import _read_json

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
    monkeypatch.setattr(
        clean_cli.typer, "confirm", lambda text, default: asked.append(text) or answer
    )
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
