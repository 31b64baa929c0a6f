"""One damaged or special file costs only its own entry: a FIFO, a character device, JSON
nested past any record's depth, numbers no record holds. Every listing reports the entry
in one warning line and shows the rest; no command hangs, none says "unexpected"."""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from accel_runner import cli

from accel import Workspace
from accel.errors import AccelError, IntegrityError

pytestmark = pytest.mark.timeout(20)

RUNS = ("20261129-100000-aaaaaa", "20261129-110000-bbbbbb")
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def ws(ws: Workspace) -> Workspace:
    """Two checkpoints (steps 1 and 2), two cache entries, two finished runs."""
    for step in (1, 2):
        ws.checkpoints.save({"model": {"w": torch.full((4,), float(step))}}, step)
    ws.cache.put("one", b"first")
    ws.cache.put("two", b"second")
    for run_id in RUNS:
        folder = ws.path / "logs" / "runs" / run_id
        folder.mkdir(parents=True)
        record = {"id": run_id, "status": "succeeded", "world_size": 1, "exit_code": 0}
        (folder / "run.json").write_text(json.dumps(record))
    return ws


def manifest(ws: Workspace, step: int = 1) -> Path:
    return ws.checkpoints_dir / "default" / f"step-{step:012d}" / "manifest.json"


def meta(ws: Workspace, key: str = "one") -> Path:
    (found,) = [p for p in ws.path.rglob("meta.json") if json.loads(p.read_text())["key"] == key]
    return found


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def edit(path: Path, change: Callable[[dict], None]) -> None:
    """Rewrite the JSON at ``path`` with ``change`` applied, keeping the text otherwise."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def huge(data: dict) -> None:
    data["size"] = int("9" * 400)


def raw_size(path: Path, text: str) -> None:
    """Put ``text`` verbatim as the recorded size (what json.dumps will not write)."""
    data = json.loads(path.read_text())
    data["size"] = "@SIZE@"
    path.write_text(json.dumps(data).replace('"@SIZE@"', text))


def assert_reported(result, *shown: str, damaged: str) -> None:  # type: ignore[no-untyped-def]
    out, err = result.stdout, result.stderr
    assert "unexpected" not in err and "Traceback" not in err, err
    assert result.exception is None or isinstance(result.exception, SystemExit), err
    assert result.exit_code == 0, (result.exit_code, err)
    for needle in shown:
        assert needle in out, out
    # Reported where the listing reports what is not an entry (its table, or a warning).
    assert damaged in out or any(
        line.startswith("warning:") and damaged in line for line in err.splitlines()
    ), (out, err)


# -- checkpoint manifests -------------------------------------------------------------------


def _nested_manifest(path: Path) -> None:
    path.write_text(DEEP)


def _nested_tag(path: Path) -> None:
    text = path.read_text()
    data = json.loads(text)
    data["tag"] = "@TAG@"
    path.write_text(json.dumps(data).replace('"@TAG@"', DEEP))


def _manifest_file_size(text: str) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        data["files"]["state.tensors"]["size"] = "@SIZE@"
        path.write_text(json.dumps(data).replace('"@SIZE@"', text))

    return damage


MANIFEST_DAMAGE: dict[str, Callable[[Path], None]] = {
    "fifo": fifo,
    "nested": _nested_manifest,
    "nested-tag": _nested_tag,
    "created-1e308": lambda p: edit(p, lambda d: d.update(created=1e308)),
    "created-nan": lambda p: p.write_text(
        p.read_text().replace('"created": ', '"created": NaN, "x": ')
    ),
    "size-400-digits": _manifest_file_size("9" * 400),
    "size-negative": _manifest_file_size("-5"),
    "size-float": _manifest_file_size("1e300"),
    "step-400-digits": lambda p: p.write_text(
        p.read_text().replace('"step": 1', '"step": 1' + "0" * 400)
    ),
}


@pytest.mark.parametrize("damage", MANIFEST_DAMAGE.values(), ids=MANIFEST_DAMAGE.keys())
def test_a_damaged_manifest_costs_only_its_checkpoint(
    ws: Workspace, damage: Callable[[Path], None]
) -> None:
    damage(manifest(ws, 1))
    assert_reported(cli("checkpoints", "list"), "default", damaged="step-000000000001")
    assert [i.step for i in ws.checkpoints.list()] == [2]
    assert ws.checkpoints.load()["model"]["w"][0] == 2.0
    (unreadable,) = ws.checkpoints.unreadable()
    assert unreadable.path.name == "step-000000000001"
    result = cli("clean", "--dry-run")
    assert "unexpected" not in result.stderr and result.exit_code == 0, result.stderr
    result = cli("status")
    assert "unexpected" not in result.stderr and result.exit_code == 0, result.stderr
    result = cli("checkpoints", "show", "1")
    assert result.exit_code in (1, 2) and "unexpected" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# -- the tensor file ------------------------------------------------------------------------


def _special(kind: str) -> Callable[[Path], None]:
    def plant(path: Path) -> None:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            try:
                os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero
            except PermissionError:
                pytest.skip("making a device node needs root")

    return plant


@pytest.mark.parametrize("kind", ["fifo", "chardev"])
@pytest.mark.parametrize("command", ["show", "verify", "export"])
def test_a_special_tensor_file_is_refused_not_read(
    ws: Workspace, tmp_path: Path, kind: str, command: str
) -> None:
    _special(kind)(manifest(ws, 1).parent / "state.tensors")
    args = ["checkpoints", command, "1"]
    if command == "export":
        args += ["-o", str(tmp_path / "out.safetensors")]
    result = cli(*args)
    err = result.stderr.strip()
    assert "unexpected" not in err and "Traceback" not in err, err
    if command == "show":  # the manifest is shown, and why its state is not
        assert result.exit_code == 0, err
        assert "state" in result.stdout and "not a regular file" in result.stdout
    else:
        assert result.exit_code == 1, (result.exit_code, err, result.stdout)
        assert "not a regular file" in err + result.stdout, (err, result.stdout)
    with pytest.raises(IntegrityError, match="not a regular file"):
        ws.checkpoints.load(1)
    assert ws.checkpoints.load(2)["model"]["w"][0] == 2.0


# -- cache entries --------------------------------------------------------------------------

META_DAMAGE: dict[str, Callable[[Path], None]] = {
    "fifo": fifo,
    "nested": lambda p: p.write_text(DEEP),
    "created-1e308": lambda p: edit(p, lambda d: d.update(created=1e308)),
    "last-used-1e308": lambda p: edit(p, lambda d: d.update(last_used=-1e308)),
    "size-400-digits": lambda p: edit(p, huge),
    "size-negative": lambda p: raw_size(p, "-5"),
}


@pytest.mark.parametrize("damage", META_DAMAGE.values(), ids=META_DAMAGE.keys())
def test_a_damaged_cache_record_costs_only_its_entry(
    ws: Workspace, damage: Callable[[Path], None]
) -> None:
    record = meta(ws, "one")
    damage(record)
    assert_reported(cli("cache", "list"), "two", damaged=str(record.parent.name))
    assert ws.cache.get("two") == b"second"
    with pytest.raises(IntegrityError, match="meta.json"):
        ws.cache.get("one")  # one line naming the file, never a hang
    result = cli("clean", "--dry-run")
    assert "unexpected" not in result.stderr and result.exit_code == 0, result.stderr
    result = cli("status")
    assert "unexpected" not in result.stderr and result.exit_code == 0, result.stderr


# -- run records ----------------------------------------------------------------------------

RUN_DAMAGE: dict[str, Callable[[Path], None]] = {
    "fifo": fifo,
    "nested": lambda p: p.write_text(DEEP),
    "nested-inside": lambda p: p.write_text('{"id": "x", "error": ' + DEEP + "}"),
    "exit-400-digits": lambda p: p.write_text(
        p.read_text().replace('"exit_code": 0', '"exit_code": 1' + "0" * 400)
    ),
}


@pytest.mark.parametrize("damage", RUN_DAMAGE.values(), ids=RUN_DAMAGE.keys())
def test_a_damaged_run_record_costs_only_its_run(
    ws: Workspace, damage: Callable[[Path], None]
) -> None:
    damage(ws.path / "logs" / "runs" / RUNS[0] / "run.json")
    result = cli("runs")
    assert_reported(result, RUNS[1], damaged=RUNS[0])
    assert any(
        line.startswith(f"warning: run {RUNS[0]}: ") and "run.json" in line
        for line in result.stderr.splitlines()
    ), result.stderr
    (row,) = [line for line in result.stdout.splitlines() if RUNS[0] in line]
    assert "unreadable" in row and "crashed" not in row, row
    for args in (("runs", "show", RUNS[0]), ("status",), ("clean", "--dry-run")):
        result = cli(*args)
        assert "unexpected" not in result.stderr, (args, result.stderr)
        assert result.exit_code in (0, 1, 2), (args, result.stderr)


# -- the workspace's own files --------------------------------------------------------------


@pytest.mark.parametrize("name", ["layout.json", "state.bin"])
@pytest.mark.parametrize("how", ["fifo", "nested"])
def test_a_damaged_workspace_file_is_one_line(ws: Workspace, name: str, how: str) -> None:
    ws.store.set("k", 1)
    path = ws.path / name
    assert path.is_file()
    if how == "fifo":
        fifo(path)
    elif name == "state.bin":
        body = ('{"k": ' + DEEP + "}").encode()
        path.write_bytes(b"accel-state 1 %08x %d\n" % (zlib.crc32(body), len(body)) + body)
    else:
        path.write_text(DEEP)
    for args in (("status",), ("checkpoints", "list")):
        result = cli(*args)
        assert "unexpected" not in result.stderr and "Traceback" not in result.stderr, (
            args,
            result.stderr,
        )
    if name == "state.bin":
        with pytest.raises(AccelError):
            ws.store.get("k")


# -- what runs append to, and the config ----------------------------------------------------


@pytest.mark.parametrize(
    "name", ["rank-0.log", "rank-0.log.idx", "metrics.jsonl", "resources.jsonl", "workers.json"]
)
def test_a_fifo_in_a_run_folder_is_never_waited_on(ws: Workspace, name: str) -> None:
    folder = ws.path / "logs" / "runs" / RUNS[0]
    (folder / "rank-0.log").write_text("hello from rank 0\n")
    path = folder / name
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    for args in (("runs", "show", RUNS[0]), ("logs", RUNS[0]), ("runs",), ("status",)):
        result = cli(*args)
        assert "unexpected" not in result.stderr and "Traceback" not in result.stderr, (
            args,
            result.stderr,
        )
        assert result.exit_code == 0, (args, result.exit_code, result.stderr)


def test_a_metric_no_float_holds_is_skipped(ws: Workspace) -> None:
    folder = ws.path / "logs" / "runs" / RUNS[0]
    lines = ['{"step": 1, "loss": 1' + "0" * 400 + "}", '{"step": 2, "loss": 0.5}']
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    result = cli("runs", "show", RUNS[0])
    assert result.exit_code == 0 and "unexpected" not in result.stderr, result.stderr
    assert "loss" in result.stdout


@pytest.mark.parametrize("how", ["fifo", "device"])
def test_a_special_config_file_is_one_config_line(ws: Workspace, how: str) -> None:
    ws.config_file.parent.mkdir(parents=True, exist_ok=True)
    ws.config_file.unlink(missing_ok=True)
    if how == "fifo":
        os.mkfifo(ws.config_file)
    else:
        ws.config_file.symlink_to("/dev/zero")  # a link to a device: followed, then refused
    result = cli("status")
    assert "unexpected" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "not a regular file" in result.stderr, result.stderr
    result = cli("config", "set", "launch.num_processes", "2")
    assert result.exit_code == 2 and "not a regular file" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("damage", ["fifo", "nested", "created-1e308"])
def test_resuming_takes_the_newest_readable_checkpoint(ws: Workspace, damage: str) -> None:
    """What load_state() resumes from: the latest checkpoint the listing accepts."""
    MANIFEST_DAMAGE[damage](manifest(ws, 2))
    latest = ws.checkpoints.latest()
    assert latest is not None and latest.step == 1
    assert ws.checkpoints.load()["model"]["w"][0] == 1.0
    with pytest.raises(IntegrityError, match="step-000000000002"):
        ws.checkpoints.load(2)


def test_a_pulled_json_payload_nested_past_any_value_is_refused(ws: Workspace) -> None:
    """Checksums are no proof against a remote: the payload's depth is bounded on read."""
    from accel.store.hashing import digest_bytes

    ws.cache.put("deep", {"a": 1})
    record = meta(ws, "deep")
    payload = record.parent / json.loads(record.read_text())["payload"]
    body = DEEP.encode()
    payload.chmod(0o644)
    payload.write_bytes(body)
    edit(record, lambda d: d.update(size=len(body), checksum=digest_bytes(body)))
    with pytest.raises(IntegrityError, match="nested more than 64 levels"):
        ws.cache.get("deep")
    with pytest.raises(AccelError, match="nested at most 64 levels"):
        ws.cache.put("deeper", json.loads("[" * 70 + "]" * 70))
    assert ws.cache.get("two") == b"second"


def test_verify_reports_a_special_file_and_checks_the_rest(ws: Workspace) -> None:
    _special("fifo")(manifest(ws, 1).parent / "state.tensors")
    result = cli("checkpoints", "verify")
    out = result.stdout + result.stderr
    assert result.exit_code == 1 and "unexpected" not in out, out
    assert "1 of 2 checkpoint(s) failed" in out and "is a FIFO, not a regular file" in out, out


def test_a_fifo_as_the_series_holder_is_no_holder(ws: Workspace) -> None:
    from accel.store.lease import read_holder, series_holder

    path = series_holder(ws.layout.root, "default")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    assert read_holder(ws.layout, "default") is None
    result = cli("checkpoints", "list")
    assert result.exit_code == 0 and "unexpected" not in result.stderr, result.stderr
