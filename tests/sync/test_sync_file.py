"""``accel sync`` end to end against a file:// remote."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sync_helpers import (
    Interrupt,
    checkpoint_file_count,
    finished_run,
    http_server,
    remote_json,
    save_checkpoints,
    tree,
)

from accel import Workspace
from accel.cli.main import main
from accel.runs import run_lock
from accel.sync import open_remote, push
from accel.sync._model import Skipped

pytestmark = pytest.mark.timeout(60)


def sync(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["sync", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else {}


def test_push_then_pull_into_a_fresh_folder_loads_bit_identical(
    ws: Workspace, remote_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    states = save_checkpoints(ws)
    finished_run(ws)
    ws.config_file.write_text("version: 1\nlaunch:\n  num_processes: 2\n")
    rc, report = sync(capsys, "push", remote_url)
    assert rc == 0 and report["transferred_files"] == checkpoint_file_count(ws) + 2 + 1

    fresh = tmp_path / "fresh" / ".accelerate"
    capsys.readouterr()
    assert main(["--workspace", str(fresh), "sync", "pull", remote_url]) == 0
    assert not (fresh / "config/accelerate_config.yaml").exists()  # aside until applied
    assert "--apply-config" in capsys.readouterr().err
    argv = ["--workspace", str(fresh), "sync", "pull", remote_url, "--apply-config", "--yes"]
    assert main(argv) == 0
    assert "+  num_processes: 2" in capsys.readouterr().err  # the difference, shown
    pulled = Workspace(fresh)
    assert [c.step for c in pulled.checkpoints.list()] == [1, 2]
    for step, state in states.items():
        loaded = pulled.checkpoints.load(step)
        assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == step
    for sub in ("checkpoints", "logs/runs"):
        assert tree(fresh / sub) == tree(ws.path / sub)
    assert Workspace(fresh).config["launch.num_processes"] == 2
    assert not list((fresh / "checkpoints/default").glob(".tmp-*"))


def test_a_backend_whose_protocol_is_a_list_is_read_as_its_names(
    ws: Workspace,
    remote_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fsspec's protocol attribute is a str or a tuple, and a list in s3fs before 2023.9
    (``["s3", "s3a"]``): ``accel sync push`` over s3fs 2023.3, the floor, said
    "unexpected TypeError: unhashable type: 'list' ... please report it"."""
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.registry import _registry

    class ListProtocol(LocalFileSystem):
        protocol = ["file", "local"]  # type: ignore[assignment]

    monkeypatch.setitem(_registry, "file", ListProtocol)
    assert open_remote(remote_url, {}, {}).local
    save_checkpoints(ws, (1,))
    rc, report = sync(capsys, "push", remote_url)
    assert rc == 0 and report["transferred_files"] == checkpoint_file_count(ws) + 1  # + config


def test_a_sharded_checkpoint_travels_whole_and_loads(
    ws: Workspace, remote_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """FSDP checkpoints (DCP's files under sharded/) push and pull like the others."""
    torch = pytest.importorskip("torch")
    info = ws.checkpoints.save({"step": 3}, 3, sharded={"w": torch.arange(6.0)})
    assert info is not None and "sharded/.metadata" in info.files
    rc, report = sync(capsys, "push", remote_url)
    assert rc == 0 and not report["skipped"], report
    sent = {t["path"] for t in report["transfers"]}
    assert {f"checkpoints/default/step-000000000003/{n}" for n in info.files} <= sent

    fresh = Workspace(tmp_path / "fresh" / ".accelerate")
    assert main(["--workspace", str(fresh.path), "sync", "pull", remote_url]) == 0
    target = {"w": torch.zeros(6)}
    assert fresh.checkpoints.load_sharded(target) == 3
    assert torch.equal(target["w"], torch.arange(6.0))


def test_second_push_moves_only_what_changed(
    ws: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1,))
    run = finished_run(ws)
    total = checkpoint_file_count(ws) + 2 + 1  # + run.json, rank-0.log, the config
    assert sync(capsys, "push", remote_url)[1]["transferred_files"] == total
    rc, report = sync(capsys, "push", remote_url)
    assert rc == 0 and report["transferred_files"] == 0 and report["unchanged_files"] == total
    (run / "rank-0.log").write_text("epoch 0 loss 1.0\nepoch 1 loss 0.5\n")
    save_checkpoints(ws, (2,))
    rc, report = sync(capsys, "push", remote_url)
    moved = sorted(t["path"] for t in report["transfers"])
    step2 = ws.checkpoints.get(2)
    assert step2 is not None
    assert moved == sorted(
        [f"checkpoints/default/step-000000000002/{name}" for name in step2.files]
        + ["checkpoints/default/step-000000000002/manifest.json"]
        + ["logs/runs/20261129-150000-aaaaaa/rank-0.log"]
    )


def test_never_pushes_live_runs_debris_or_state_and_says_why_with_exit_0(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1,))
    ws.store.set("k", 1)
    (ws.checkpoints_dir / "default" / ".tmp-000000000010-abc").mkdir()
    (ws.tmp_dir / ".accel-tmp-x").write_bytes(b"x")
    finished_run(ws, "20261129-140000-bbbbbb")
    live = finished_run(ws, "20261129-150000-cccccc")
    with run_lock(ws.layout, live.name):
        rc, report = sync(capsys, "push", remote_url)
    assert rc == 0 and report["ok"]
    names = set(tree(remote_dir))
    assert not any("cccccc" in n or "tmp" in n for n in names)
    assert not any(n.startswith(("locks", "state.bin", "tmp", "layout")) for n in names)
    assert "logs/runs/20261129-140000-bbbbbb/run.json" in names
    reasons = {s["unit"]: s["reason"] for s in report["skipped"]}
    assert reasons["logs/runs/20261129-150000-cccccc"] == "live run: pushed after it ends"
    assert "a save in progress" in reasons["checkpoints/default/.tmp-000000000010-abc"]
    assert not any(s["blocking"] for s in report["skipped"])


def _damage_torn(step: Path) -> None:
    step.mkdir()
    (step / "state.pt").write_bytes(b"half")


def _damage_truncated(step: Path) -> None:
    tensors = step / "state.tensors"
    tensors.write_bytes(tensors.read_bytes()[:-4])


def _damage_missing(step: Path) -> None:
    (step / "state.tensors").unlink()


def _damage_manifest(step: Path) -> None:
    (step / "manifest.json").write_text("{not json")


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_damage_torn, "its manifest is missing or not valid"),
        (_damage_truncated, "state.tensors has"),
        (_damage_missing, "state.tensors is missing"),
        (_damage_manifest, "its manifest is missing or not valid"),
    ],
)
def test_a_committed_checkpoint_push_cannot_send_exits_1_and_says_why(
    ws: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    damage: Any,
    said: str,
) -> None:
    save_checkpoints(ws, (1, 9))
    step9 = ws.checkpoints_dir / "default" / "step-000000000009"
    if damage is _damage_torn:
        import shutil

        shutil.rmtree(step9)
    damage(step9)
    capsys.readouterr()
    rc = main(["sync", "push", remote_url])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"skipped checkpoints/default/step-000000000009: not sent: {said}" in err, err
    assert "accel checkpoints verify" in err
    names = set(tree(remote_dir))
    assert "checkpoints/default/step-000000000001/manifest.json" in names  # the rest moved
    assert not any("step-000000000009" in n for n in names)


def test_a_linked_sharded_folder_is_not_sent_and_the_reason_is_the_link(
    ws: Workspace, remote_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    info = ws.checkpoints.save({"step": 3}, 3, sharded={"w": torch.arange(6.0)})
    assert info is not None
    sharded = ws.checkpoints_dir / "default" / "step-000000000003" / "sharded"
    elsewhere = tmp_path / "elsewhere"
    sharded.rename(elsewhere)
    sharded.symlink_to(elsewhere)
    rc, report = sync(capsys, "push", remote_url)
    assert rc == 1 and not report["ok"]
    (skip,) = report["skipped"]
    assert skip["blocking"] and "sharded/ is a link" in skip["reason"], skip


def test_a_checkpoint_retired_while_push_reads_it_is_no_failure(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """A live run's retention may remove a checkpoint between listing and reading."""
    from accel.sync._inventory import checkpoint_files

    save_checkpoints(ws, (1,))
    step = ws.checkpoints_dir / "default" / "step-000000000001"
    import shutil

    shutil.rmtree(step)
    (skip,) = list(checkpoint_files(step, "checkpoints/default/step-000000000001"))
    assert isinstance(skip, Skipped) and not skip.blocking
    assert "removed here while push read it" in skip.reason


def test_a_pull_that_keeps_a_different_local_checkpoint_exits_1(
    ws: Workspace, remote_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1,))
    assert main(["sync", "push", remote_url]) == 0
    other = Workspace(tmp_path / "other" / ".accelerate")
    torch = pytest.importorskip("torch")
    other.checkpoints.save({"w": torch.ones(3), "step": 1}, 1)
    capsys.readouterr()
    rc = main(["--workspace", str(other.path), "sync", "pull", remote_url])
    err = capsys.readouterr().err
    assert rc == 1
    assert "skipped checkpoints/default/step-000000000001: exists here with other content" in err


def test_dry_run_moves_nothing(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1,))
    before = tree(ws.path)
    rc, report = sync(capsys, "push", remote_url, "--dry-run")
    planned = checkpoint_file_count(ws) + 1
    assert rc == 0 and report["dry_run"] and report["planned_files"] == planned
    assert not remote_dir.exists()
    # nothing written here either, not even a lock file: a dry run works in a workspace
    # it may only read (a shared or read-only copy)
    assert tree(ws.path) == before
    assert main(["sync", "push", remote_url]) == 0
    fresh = ws.path.parent / "other" / ".accelerate"
    capsys.readouterr()
    assert main(["--workspace", str(fresh), "sync", "pull", remote_url, "--dry-run"]) == 0
    assert f"would pull {planned} files" in capsys.readouterr().out
    assert not fresh.exists()


def test_an_interrupted_push_resumes_where_it_stopped(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1, 2, 3))
    remote = open_remote(remote_url, {}, os.environ)
    first = sum(p.stat().st_size for p in ws.checkpoints.list()[0].path.iterdir())
    with pytest.raises(KeyboardInterrupt):  # stops inside the second checkpoint
        push(ws, remote, reporter=Interrupt(first + 100))
    index = json.loads((remote_dir / "accel-sync.json").read_text())["files"]
    assert sum(rel.endswith("manifest.json") for rel in index) == 1  # the first one
    rc, report = sync(capsys, "push", remote_url)
    moved = {t["path"].rsplit("/", 1)[0] for t in report["transfers"]}
    assert rc == 0 and moved == {
        "checkpoints/default/step-000000000002",
        "checkpoints/default/step-000000000003",
        "config",
    }
    assert not [p for p in tree(remote_dir) if ".accel-tmp-" in p]  # debris swept


def test_a_tampered_remote_file_is_refused_at_pull(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1, 2))
    assert main(["sync", "push", remote_url]) == 0
    info = ws.checkpoints.get(2)
    assert info is not None
    target = remote_dir / "checkpoints/default/step-000000000002" / info.files[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    fresh = ws.path.parent / "other" / ".accelerate"
    capsys.readouterr()
    assert main(["--workspace", str(fresh), "sync", "pull", remote_url]) == 1
    err = capsys.readouterr().err
    assert "step-000000000002" in err and "refused" in err
    pulled = Workspace(fresh)
    assert [c.step for c in pulled.checkpoints.list()] == [1]
    assert sorted(p.name for p in (fresh / "checkpoints/default").iterdir()) == [
        "step-000000000001"
    ]


def test_a_forged_index_cannot_write_outside_the_workspace(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sync", "push", remote_url]) == 0
    index_path = remote_dir / "accel-sync.json"
    index = json.loads(index_path.read_text())
    index["files"]["checkpoints/../../../evil"] = {"size": 1, "checksum": "xxh3_64:" + "0" * 16}
    index_path.write_text(json.dumps(index))
    fresh = ws.path.parent / "other" / ".accelerate"
    capsys.readouterr()
    assert main(["--workspace", str(fresh), "sync", "pull", remote_url]) == 1
    assert "unsafe path" in capsys.readouterr().err
    assert not fresh.exists()


def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    ws: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(ws.path)
    for argv, expected in (
        (["pull", remote_url], "nothing was pushed"),
        (["push", "gs://bucket/x"], "install gcsfs"),
        (["push", "nope://x"], "not a protocol fsspec knows"),
        (["push", remote_url, "--storage-option", "oops"], "KEY=VALUE"),
    ):
        capsys.readouterr()
        assert main(["sync", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert expected in err and len(err.splitlines()) == 1, err
    assert tree(ws.path) == before


def test_push_verify_refuses_a_locally_damaged_checkpoint(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoints(ws, (1, 2))
    info = ws.checkpoints.get(2)
    assert info is not None
    damaged = info.path / info.files[0]
    data = bytearray(damaged.read_bytes())
    data[-10] ^= 0x01
    damaged.write_bytes(bytes(data))
    rc, report = sync(capsys, "push", remote_url, "--verify")
    assert rc == 1
    assert report["failed"][0]["unit"] == "checkpoints/default/step-000000000002"
    assert "fails its manifest checksum" in report["failed"][0]["reason"]
    index = json.loads((remote_dir / "accel-sync.json").read_text())["files"]
    assert not [rel for rel in index if "step-000000000002" in rel]
    assert not (remote_dir / "checkpoints/default/step-000000000002/manifest.json").exists()


def test_progress_bar_shows_bytes_and_rate_on_a_terminal(
    ws: Workspace, remote_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from accel.cli import _output
    from accel.cli import sync as sync_cli

    save_checkpoints(ws, (1,))
    screen = io.StringIO()
    monkeypatch.setattr(
        _output, "console", lambda stderr=False: Console(file=screen, force_terminal=True)
    )
    bar = sync_cli._ProgressBar("push")
    push(ws, open_remote(remote_url, {}, os.environ), reporter=bar)
    shown = screen.getvalue()
    assert (
        f"pushing {checkpoint_file_count(ws) + 1} files" in shown
        and "/s" in shown
        and "KiB" in shown
    )


@pytest.mark.parametrize(
    ("module", "url", "hint"),
    [
        ("fsspec", "file:///tmp/x", "accel-workspace[sync]"),
        ("s3fs", "s3://bucket/x", "accel-workspace[s3]"),
    ],
)
def test_a_missing_backend_is_one_line_naming_the_extra(
    ws: Workspace,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    url: str,
    hint: str,
) -> None:
    import sys

    from fsspec.registry import _registry

    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    monkeypatch.delitem(_registry, "s3", raising=False)  # forget an s3fs imported earlier
    capsys.readouterr()
    assert main(["sync", "push", url]) == 2
    err = capsys.readouterr().err.strip()
    assert hint in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("direction", ["push", "pull"])
def test_a_remote_that_cannot_be_reached_is_one_line_naming_it(
    ws: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    direction: str,
) -> None:
    """`accel sync push ftp://typo` said "cannot use None: Name or service not known;
    check that the disk is writable": the backend connects when it is made, and its
    socket error reached the CLI's last resort, which took it for the disk's."""
    import socket

    from fsspec.implementations.ftp import FTPFileSystem
    from fsspec.registry import _registry

    class Unreachable(FTPFileSystem):  # ftp:// connects as it is made; no host has the name
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise socket.gaierror(-2, "Name or service not known")

        def __del__(self) -> None:  # FTPFileSystem's closes a connection this never made
            pass

    monkeypatch.setitem(_registry, "ftp", Unreachable)
    save_checkpoints(ws, (1,))
    before = tree(ws.path)
    fresh = tmp_path / "fresh" / ".accelerate"
    target = ws.path if direction == "push" else fresh
    capsys.readouterr()
    url = "ftp://user:hunter2@host/prefix"
    assert main(["--workspace", str(target), "sync", direction, url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "ftp://" in err and "host/prefix" in err and "hunter2" not in err, err
    assert "Name or service not known" in err and "check the URL" in err, err
    assert "None" not in err and "disk" not in err, err
    assert tree(ws.path) == before and not fresh.exists()


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "report" not in err, err
    return err


@pytest.mark.timeout(60)
def test_a_workspace_served_over_http_pulls_whole_and_a_push_there_is_refused(
    ws: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pushed folder behind any web server is a remote to pull from; a push to an
    http:// URL went on to POST into the server and died as "unexpected
    ClientResponseError: 501 ... (please report it)"."""
    pytest.importorskip("aiohttp", reason="fsspec's http:// needs aiohttp (s3fs brings it)")
    save_checkpoints(ws, (1, 2))
    served = tmp_path / "served"
    assert main(["--workspace", str(ws.path), "sync", "push", served.as_uri()]) == 0
    fresh = tmp_path / "fresh" / ".accelerate"
    before = tree(ws.path)
    with http_server(served) as url:
        capsys.readouterr()
        assert main(["--workspace", str(fresh), "sync", "pull", url]) == 0
        assert main(["--workspace", str(fresh), "checkpoints", "verify"]) == 0
        capsys.readouterr()
        assert main(["--workspace", str(ws.path), "sync", "push", f"{url}/x"]) == 2
    err = one_error_line(capsys)
    assert f"{url}/x: http:// is read-only for accel sync (pull works from it)" in err, err
    assert tree(ws.path) == before and not (served / "x").exists()
    assert [c.step for c in Workspace(fresh).checkpoints.all()] == [1, 2]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("option", "said"),
    [("bogus=1", "unexpected keyword argument 'bogus'"), ("client_kwargs=x", "")],
)
def test_a_storage_option_the_backend_does_not_take_is_one_line_not_a_crash(
    ws: Workspace, capsys: pytest.CaptureFixture[str], option: str, said: str
) -> None:
    """s3fs takes -o options at its first request (aiobotocore's session) and raised a
    TypeError (or an AttributeError) there: accel called it a bug of its own
    ('unexpected TypeError ... please report it') and wrote a crash log. Other releases
    refuse the option as the filesystem is made: 'bad --storage-option', exit 2."""
    pytest.importorskip("s3fs")
    save_checkpoints(ws, (1,))
    before = tree(ws.path)
    capsys.readouterr()
    code = main(["--workspace", str(ws.path), "sync", "push", "s3://bucket/x", "-o", option])
    err = one_error_line(capsys)
    assert code in (1, 2) and err.startswith("error: s3://bucket/x: ") and said in err, err
    assert tree(ws.path) == before


@pytest.mark.timeout(60)
def test_an_http_remote_that_refuses_or_fails_is_one_line_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """http:// connects at the first request, not when the filesystem is made: a refused
    connection came out as `ClientConnectorError: Cannot connect to host`, and a server's
    500 as a crash to report (aiohttp's ClientResponseError is no OSError)."""
    pytest.importorskip("aiohttp", reason="fsspec's http:// needs aiohttp (s3fs brings it)")
    from run_helpers import free_port

    fresh = tmp_path / "fresh" / ".accelerate"
    url = f"http://127.0.0.1:{free_port()}/prefix"  # nothing listens there
    capsys.readouterr()
    assert main(["--workspace", str(fresh), "sync", "pull", url]) == 1
    err = one_error_line(capsys)
    assert f"{url}: cannot reach the remote: " in err and "check the URL" in err, err
    with http_server(tmp_path, status=500) as served:
        assert main(["--workspace", str(fresh), "sync", "pull", served]) == 1
    err = one_error_line(capsys)
    assert err.startswith(f"error: {served}: ClientResponseError: 500"), err
    assert not fresh.exists()


def test_an_os_error_naming_no_file_is_not_blamed_on_the_disk(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's last resort for an OSError names no file that is not there ("cannot use
    None") and sends nobody to check a disk for a refused connection."""
    import accel.sync

    def refused(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(accel.sync, "open_remote", refused)
    capsys.readouterr()
    assert main(["sync", "push", "file:///tmp/x"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Connection refused" in err, err
    assert "None" not in err and "disk" not in err, err


def test_refused_credentials_say_so_and_a_local_folder_is_not_blamed_on_them() -> None:
    from accel.sync._remote import backend_error

    refused = backend_error("s3://b/p", PermissionError("Access Denied"))
    assert str(refused) == (
        "s3://b/p: PermissionError: Access Denied; the credentials in use are refused "
        "there: check which are used and what they may do"
    )
    local = backend_error("file:///srv/p", PermissionError(13, "Permission denied"))
    assert "credentials" not in str(local)


def test_a_backend_error_that_only_leads_in_on_its_first_line_keeps_its_reason() -> None:
    from accel.sync._remote import backend_error

    # botocore's ParamValidationError: the first line alone said nothing
    exc = ValueError('Parameter validation failed:\nInvalid bucket name "a b": must match\n')
    assert str(backend_error("s3://b/p", exc)) == (
        's3://b/p: ValueError: Parameter validation failed: Invalid bucket name "a b": must match'
    )
    assert str(backend_error("s3://b/p", ValueError("one\ntwo"))) == "s3://b/p: ValueError: one"


BAD_URLS = {  # issue 22: the first four uploaded into the current folder
    "": "is empty",
    "file://": "names no folder",
    "::::": "chained fsspec URLs",
    "file://relative": "names the host 'relative'",
    "file://host/srv/backup": "names the host 'host'",
    "file:///": "names the filesystem root",
    "file:////": "names the filesystem root",
    "file:///tmp/..": "names the filesystem root",
    "local:///": "names the filesystem root",
    "relative/folder": "not a URL",
    "/abs/folder": "not a URL: write file:///abs/folder",
    "s3://": "names no bucket",
    "nosuchproto://bucket/x": "not a protocol fsspec knows",
    "file:///tmp/x\x1b]0;t\x07": "control characters",
    "file:///tmp/x/\udcff": "not valid UTF-8",  # the byte 0xff, as Python keeps it from argv
    # credentials in a bucket's URL: s3fs took them for the bucket's name and botocore
    # said "ParamValidationError: Parameter validation failed:", its reason cut off
    "s3://AKIAEXAMPLE:s3cr3t@bucket/p": "carry no credentials",
    "gs://user:s3cr3t@bucket/p": "carry no credentials",
    # a query or a fragment: pushed into a folder named '/tmp/x?y=1' (file://)
    "file:///tmp/x?y=1": "no query or fragment",
    "file:///tmp/x#part": "no query or fragment",
    "s3://bucket/p?versionId=1": "no query or fragment",
    # '..': another folder on one backend, a key named '..' on another
    "file:///tmp/remote/../elsewhere": "no '.' or '..' parts",
    "file:///tmp/./remote": "no '.' or '..' parts",
    "s3://bucket/../p": "no '.' or '..' parts",
    "memory://bucket/p/..": "no '.' or '..' parts",
}


@pytest.mark.parametrize("direction", ["push", "pull"])
@pytest.mark.parametrize("url", sorted(BAD_URLS))
def test_an_odd_url_is_refused_in_one_line_and_nothing_is_written(
    ws: Workspace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    direction: str,
    url: str,
) -> None:
    save_checkpoints(ws, (1,))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    fresh = tmp_path / "fresh" / ".accelerate"
    target = ws.path if direction == "push" else fresh
    before = tree(ws.path)
    capsys.readouterr()
    assert main(["--workspace", str(target), "sync", direction, url]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and BAD_URLS[url] in err, err
    assert "file:///" in err or "bucket" in err  # the right form
    assert "\x1b" not in err and "s3cr3t" not in err
    assert not any(cwd.iterdir()) and not fresh.exists() and tree(ws.path) == before


@pytest.mark.slow
def test_sync_help_imports_neither_torch_nor_fsspec() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from accel.cli.main import main; main(['sync', 'push', '--help']); "
        "print(sorted(m for m in ('torch', 'fsspec', 's3fs') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_an_interrupted_pull_leaves_no_partial_checkpoint_and_resumes(
    ws: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel.sync import pull

    save_checkpoints(ws, (1, 2))
    assert main(["sync", "push", remote_url]) == 0
    fresh = Workspace(ws.path.parent / "other" / ".accelerate")
    first = sum(p.stat().st_size for p in ws.checkpoints.list()[0].path.iterdir())
    with pytest.raises(KeyboardInterrupt):
        pull(fresh, open_remote(remote_url, {}, os.environ), reporter=Interrupt(first + 100))
    series = fresh.checkpoints_dir / "default"
    assert [p.name for p in series.iterdir()] == ["step-000000000001"]  # no stage left
    capsys.readouterr()
    assert main(["--workspace", str(fresh.path), "sync", "pull", remote_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {t["path"].rsplit("/", 1)[0] for t in report["transfers"]} == {
        "checkpoints/default/step-000000000002",
        "config",
    }
    assert [c.step for c in fresh.checkpoints.list()] == [1, 2]


def test_the_cache_moves_only_with_include_cache_and_only_committed_entries(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ws.cache.put("ns/blob", b"payload" * 100)
    kernels = ws.cache_dir / "frameworks" / "inductor" / "ab"
    kernels.mkdir(parents=True)
    (kernels / "kernel.py").write_text("# compiled\n")
    torn = ws.cache_dir / "entries" / "half.entry"
    torn.mkdir(parents=True)
    (torn / "payload").write_bytes(b"x")
    assert main(["sync", "push", remote_url]) == 0
    assert not [p for p in tree(remote_dir) if p.startswith("cache/")]
    assert main(["sync", "push", remote_url, "--include-cache"]) == 0
    pushed = [p for p in tree(remote_dir) if p.startswith("cache/")]
    assert "cache/frameworks/inductor/ab/kernel.py" in pushed
    assert not [p for p in pushed if "half.entry" in p]

    fresh = Workspace(ws.path.parent / "other" / ".accelerate")
    assert main(["--workspace", str(fresh.path), "sync", "pull", remote_url]) == 0
    assert "ns/blob" not in fresh.cache
    capsys.readouterr()
    argv = ["--workspace", str(fresh.path), "sync", "pull", remote_url, "--include-cache"]
    assert main(argv) == 1  # compiled kernels from a remote are code: refused and listed
    assert "cache/frameworks/inductor/ab/kernel.py: refused" in capsys.readouterr().err
    assert fresh.cache.get("ns/blob") == b"payload" * 100
    assert not (fresh.cache_dir / "frameworks").exists()


@pytest.mark.timeout(20)
def test_sync_hashes_only_regular_files_and_never_waits_on_a_fifo(tmp_path: Path) -> None:
    """A FIFO swapped in for a file push or pull is about to hash is refused at once."""
    from accel.store.hashing import hash_file

    fifo = tmp_path / "rank-0.log"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        hash_file(fifo)
    (tmp_path / "real").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="link"):
        hash_file(tmp_path / "link")
    assert hash_file(tmp_path / "real")[1] == 3


def test_push_sends_only_the_files_accel_writes_in_a_run_folder(
    ws: Workspace, remote_dir: Path, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's notebook in a run folder stays local (the pull would refuse it), so the
    workspace round-trips: push, then pull elsewhere, both exit 0."""
    folder = finished_run(ws)
    (folder / "analysis.ipynb").write_text("{}")
    assert main(["sync", "push", remote_url]) == 0
    said = capsys.readouterr()
    assert "analysis.ipynb: not a file accel writes" in said.out + said.err
    run_rel = f"logs/runs/{folder.name}"
    assert (remote_dir / run_rel / "rank-0.log").is_file()
    assert not (remote_dir / run_rel / "analysis.ipynb").exists()
    fresh = ws.path.parent / "other" / ".accelerate"
    assert main(["--workspace", str(fresh), "sync", "pull", remote_url]) == 0
    assert (fresh / "logs" / "runs" / folder.name / "rank-0.log").is_file()


class _Retire:
    """A reporter that removes a checkpoint once the push has planned: retention's race."""

    def __init__(self, step: Path) -> None:
        self.step = step

    def begin(self, total_bytes: int, total_files: int) -> None:
        import shutil

        shutil.rmtree(self.step)

    def advance(self, num_bytes: int) -> None:
        pass

    def end(self) -> None:
        pass


def test_a_checkpoint_retired_while_it_is_pushed_is_skipped_not_failed(
    ws: Workspace, remote_url: str
) -> None:
    save_checkpoints(ws, (1, 2))
    step1 = ws.checkpoints_dir / "default" / "step-000000000001"
    result = push(ws, open_remote(remote_url, {}, {}), reporter=_Retire(step1))
    assert result.ok and not result.failed, result
    reasons = {s.unit: s.reason for s in result.plan.skipped}
    assert "removed here while it was pushed" in reasons["checkpoints/default/step-000000000001"]


def test_retention_waits_for_a_checkpoint_being_pushed_and_leaves_no_orphan_there(
    ws: Workspace, remote_url: str, remote_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A live run's retention retired a checkpoint half-way through its upload: its first
    # files stayed on the remote for good, listed by no index.
    from accel.store.lease import SeriesLease, apply_retention

    with SeriesLease(ws.layout, "default"):  # the run that saved them, ended since
        save_checkpoints(ws, (1, 2))
    remote = open_remote(remote_url, {}, {})
    upload, paid = remote.upload, []

    def upload_then_retain(local: Path, rel: str, *args: Any, **kwargs: Any) -> Any:
        done = upload(local, rel, *args, **kwargs)
        if rel.startswith("checkpoints/default/step-000000000001/") and not paid:
            paid.append(apply_retention(ws.layout, "default", 1))  # the run's next save
        return done

    monkeypatch.setattr(remote, "upload", upload_then_retain)
    result = push(ws, remote)
    assert paid == [False]  # held back while the checkpoint was read
    assert result.ok and not result.failed and not result.plan.skipped, result
    index = remote_json(remote_dir, "accel-sync.json")["files"]
    on_remote = {
        p.relative_to(remote_dir).as_posix()
        for p in (remote_dir / "checkpoints").rglob("*")
        if p.is_file()
    }
    assert on_remote == {rel for rel in index if rel.startswith("checkpoints/")}
    assert {rel.split("/")[2] for rel in on_remote} == {
        "step-000000000001",
        "step-000000000002",
    }
    # Paid once the push let go: no live run holds the series.
    assert [info.step for info in ws.checkpoints.list()] == [2]
