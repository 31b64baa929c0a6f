"""`accel cache list|rm` on entries the cache really wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from accel_runner import cli, runs_without_heavy_imports

from accel.workspace import Workspace

LIVE_RUN = "20990101-000000-abcdef"


def run(exe: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*exe, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def keys(ws: Workspace) -> list[str]:
    return [e.key for e in ws.cache.entries()]


@pytest.fixture
def ws(ws: Workspace, project: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    ws.cache.put("datasets/train-index", {"shards": [1, 2, 3]})
    ws.cache.put("datasets/valid-index", b"\x00" * 100)
    (project / "vocab.txt").write_text("a\nb\n")
    ws.cache.put("tokenizer/vocab", project / "vocab.txt")
    monkeypatch.setenv("ACCEL_RUN_ID", "20260101-000000-aaaaaa")
    ws.cache.put("features/layer1", torch.ones(64))
    return ws


@pytest.mark.slow
def test_list_json_and_table(ws: Workspace, accel_exe: list[str]) -> None:
    result = run(accel_exe, "cache", "list", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    rows = {e["key"]: (e["kind"], e["size"], e["run_id"]) for e in data["entries"]}
    infos = {i.key: i for i in ws.cache.entries()}
    assert rows == {
        "datasets/train-index": ("json", infos["datasets/train-index"].size, None),
        "datasets/valid-index": ("bytes", 100, None),
        "tokenizer/vocab": ("file", 4, None),
        "features/layer1": ("tensors", infos["features/layer1"].size, "20260101-000000-aaaaaa"),
    }
    assert all(e["last_used"] == infos[e["key"]].last_used for e in data["entries"])
    assert data["total_bytes"] == sum(i.size for i in infos.values()) and data["other"] == []
    table = run(accel_exe, "cache", "list").stdout.splitlines()
    assert table[0].split() == ["key", "kind", "size", "last", "used", "run"]
    assert table[1].split()[:2] == ["datasets/train-index", "json"]
    assert table[-1].startswith("4 entries")
    only = json.loads(run(accel_exe, "cache", "list", "--prefix", "datasets/", "--json").stdout)
    assert [e["key"] for e in only["entries"]] == ["datasets/train-index", "datasets/valid-index"]


def test_list_reports_unfinished_and_unreadable_entries(ws: Workspace) -> None:
    torn = ws.cache.entry_dir("datasets/torn")  # a put killed before meta.json
    torn.mkdir()
    (torn / ".accel-owned").touch()
    bad = ws.cache.entry_dir("datasets/bad")
    bad.mkdir()
    (bad / ".accel-owned").touch()
    (bad / "meta.json").write_text('{"format": 1, "key": "datasets/bad"}')
    result = cli("cache", "list", "--json")
    assert result.exit_code == 0, result.output
    other = {o["key"]: (o["state"], o["reason"]) for o in json.loads(result.stdout)["other"]}
    assert other["datasets/torn"][0] == "debris"
    assert other["datasets/bad"][0] == "unreadable" and "kind" in other["datasets/bad"][1]
    assert "Not entries" in cli("cache", "list").stdout


@pytest.mark.slow
def test_rm_a_key_plans_then_removes(ws: Workspace, accel_exe: list[str]) -> None:
    dry = run(accel_exe, "cache", "rm", "datasets/valid-index", "--dry-run")
    assert dry.returncode == 0 and "datasets/valid-index" in dry.stdout
    asks = run(accel_exe, "cache", "rm", "datasets/valid-index")  # no terminal, no --yes
    assert asks.returncode == 2 and "pass --yes" in asks.stderr
    assert "datasets/valid-index" in keys(ws)
    gone = run(accel_exe, "cache", "rm", "datasets/valid-index", "--yes", "--json")
    assert gone.returncode == 0, gone.stderr
    assert [r["name"] for r in json.loads(gone.stdout)["removed"]] == ["datasets/valid-index"]
    assert "datasets/valid-index" not in keys(ws)
    assert not ws.cache.entry_dir("datasets/valid-index").exists()
    assert len(keys(ws)) == 3


def test_rm_a_prefix_removes_only_what_starts_with_it(ws: Workspace) -> None:
    result = cli("cache", "rm", "--prefix", "datasets/", "--yes")
    assert result.exit_code == 0, result.output
    assert "removed 2 item(s)" in result.stdout
    assert keys(ws) == ["features/layer1", "tokenizer/vocab"]
    nothing = cli("cache", "rm", "--prefix", "datasets/", "--yes")
    assert nothing.exit_code == 0 and "nothing to remove" in nothing.stdout


def test_rm_removes_a_damaged_entry_by_its_key(ws: Workspace) -> None:
    entry = ws.cache.entry_dir("datasets/train-index")
    (entry / "meta.json").write_text("{broken")
    assert cli("cache", "rm", "datasets/train-index", "-y").exit_code == 0
    assert not entry.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["../outside"], "invalid cache key '../outside'"),
        (["/etc/passwd"], "invalid cache key '/etc/passwd'"),
        (["datasets/../tokenizer/vocab"], "its part '..' starts with '.'"),
        (["datasets/missing"], "no cache entry 'datasets/missing'"),
        (["--prefix", "../"], "invalid --prefix '../'"),
        (["--prefix", "/"], "invalid --prefix '/'"),
        (["caf\udce9"], "invalid cache key 'caf\\udce9': it is not valid UTF-8 text"),
        (["--prefix", "\udce9"], "invalid --prefix '\\udce9': it is not valid UTF-8 text"),
        ([], "give a KEY or --prefix PREFIX"),
        (["datasets/train-index", "--prefix", "datasets/"], "give a KEY or --prefix PREFIX"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    ws: Workspace, args: list[str], message: str
) -> None:
    before = keys(ws)
    result = cli("cache", "rm", *args, "--yes")
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert keys(ws) == before


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--prefix", "\udce9"),
        ("rm", "--prefix", "datasets/caf\udce9", "--dry-run"),
        ("rm", "caf\udce9", "--dry-run"),
    ],
    ids=["list-prefix", "rm-prefix", "rm-key"],
)
def test_a_key_that_is_not_utf8_is_one_line_exit_2(ws: Workspace, args: tuple[str, ...]) -> None:
    """``$'caf\\xe9'`` in a UTF-8 shell: argv holds the byte as a lone surrogate."""
    result = cli("cache", *args)
    assert result.exit_code == 2, result.output
    assert "is not valid UTF-8 text" in result.stderr and "unexpected" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_rm_never_follows_a_namespace_link_out_of_the_cache(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "x.entry"
    victim.mkdir()
    (victim / ".accel-owned").touch()
    (victim / "data.bin").write_bytes(b"precious")
    (ws.cache_dir / "entries" / "linked").symlink_to(outside)
    result = cli("cache", "rm", "linked/x", "--yes")
    assert result.exit_code == 2 and "is a link out of the cache" in result.stderr
    assert (victim / "data.bin").read_bytes() == b"precious"


LAUNCHER = textwrap.dedent(
    f"""
    import sys, time
    from accel.workspace import Workspace
    from accel.runs import run_lock
    with run_lock(Workspace(sys.argv[1]).layout, {LIVE_RUN!r}):
        print("ready", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_rm_keeps_what_a_live_run_used(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_RUN_ID", LIVE_RUN)
    ws.cache.put("datasets/live", b"in use")
    monkeypatch.delenv("ACCEL_RUN_ID")
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(ws.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None and launcher.stdout.readline().strip() == "ready"
        one = cli("cache", "rm", "datasets/live", "--yes")
        assert one.exit_code == 1 and f"used by the live run {LIVE_RUN}" in one.stderr
        some = cli("cache", "rm", "--prefix", "datasets/", "--yes", "--json")
        assert some.exit_code == 1
        data = json.loads(some.stdout)
        assert [k["name"] for k in data["kept"]] == ["datasets/live"]
        assert sorted(r["name"] for r in data["removed"]) == [
            "datasets/train-index",
            "datasets/valid-index",
        ]
        assert "datasets/live" in keys(ws)
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    assert cli("cache", "rm", "datasets/live", "--yes").exit_code == 0
    assert "datasets/live" not in keys(ws)


@pytest.mark.slow
def test_list_and_rm_do_not_import_torch(ws: Workspace) -> None:
    result = runs_without_heavy_imports(
        ("cache", "list"),
        ("cache", "list", "--json"),
        ("cache", "rm", "--prefix", "datasets/", "--yes"),
    )
    assert result.returncode == 0, result.stderr
