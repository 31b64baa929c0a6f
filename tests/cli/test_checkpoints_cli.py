"""`accel checkpoints list|show|verify|export|rm` on checkpoints the store really wrote."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from accel_runner import cli, runs_without_heavy_imports

import run_helpers
from accel.store.checkpoints import STATE_TENSORS, Checkpoints
from accel.workspace import Workspace


def run(exe: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*exe, *args], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


SAVER = Path(__file__).parent / "scripts" / "save_checkpoints.py"


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def flip_byte(path: Path, offset: int = -9) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    def raw(t: torch.Tensor) -> bytes:
        return bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())

    return a.dtype == b.dtype and a.shape == b.shape and raw(a) == raw(b)


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The saver run once per module (and test process), in a project of its own: a
    run of it cost 4-5 s of the suite for each of the 16 tests that use its output."""
    folder = tmp_path_factory.mktemp("saved")
    env = run_helpers.alone_env(folder)
    subprocess.run([sys.executable, str(SAVER)], cwd=folder, check=True, timeout=120, env=env)
    return folder


@pytest.fixture
def saved(ws: Workspace, project: Path, saved_once: Path) -> dict[str, Any]:
    """Accelerator.save_state at steps 10 and 20 (series default), a plain state dict at
    step 5 of series 'plain'; ``state``: the model's state dict at step 20 and 5. The
    checkpoints are a copy of the module's one saver run (:func:`saved_once`)."""
    source = saved_once / ".accelerate" / "checkpoints"
    shutil.copytree(source, ws.checkpoints_dir, symlinks=True, dirs_exist_ok=True)
    shutil.copy2(saved_once / "expected.pt", project / "expected.pt")
    return {"state": torch.load(project / "expected.pt", weights_only=True)}


# -- list -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_list_json_and_table(saved: dict[str, Any], ws: Workspace, accel_exe: list[str]) -> None:
    result = run(accel_exe, "checkpoints", "list", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    rows = [(c["series"], c["step"], c["tag"]) for c in data["checkpoints"]]
    assert rows == [("default", 10, None), ("default", 20, "best"), ("plain", 5, None)]
    sizes = {c["step"]: c["size"] for c in data["checkpoints"]}
    for step, size in sizes.items():
        series = "plain" if step == 5 else "default"
        folder = ws.checkpoints_dir / series / f"step-{step:012d}"
        listed = json.loads((folder / "manifest.json").read_text())["files"]
        assert size == sum(f["size"] for f in listed.values())
    assert all(c["age_seconds"] >= 0 and c["files"] >= 1 for c in data["checkpoints"])
    assert data["other"] == []
    table = run(accel_exe, "checkpoints", "list").stdout.splitlines()
    assert table[0].split() == ["series", "step", "size", "age", "run", "tag"]
    assert table[2].split()[:2] == ["default", "20"] and table[2].split()[-1] == "best"
    assert "3 checkpoint(s)" in table[-1]


@pytest.mark.slow
def test_list_reports_debris_and_unreadable_folders_without_crashing(
    saved: dict[str, Any], ws: Workspace
) -> None:
    series = ws.checkpoints_dir / "default"
    stage = series / ".tmp-000000000030-0123456789ab"  # a save killed before its commit
    stage.mkdir()
    (stage / ".accel-owned").touch()
    (stage / STATE_TENSORS).write_bytes(b"half")
    bad = series / "step-000000000040"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    (series / "notes.txt").write_text("mine")
    result = cli("checkpoints", "list", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [c["step"] for c in data["checkpoints"] if c["series"] == "default"] == [10, 20]
    kinds = {Path(o["path"]).name: (o["kind"], o["reason"]) for o in data["other"]}
    assert kinds[stage.name] == ("debris", None)
    assert kinds["notes.txt"] == ("unknown", None)
    assert kinds[bad.name][0] == "unreadable" and "not valid JSON" in kinds[bad.name][1]
    table = cli("checkpoints", "list")
    assert table.exit_code == 0 and "Not checkpoints" in table.stdout
    assert "unreadable" in table.stdout and "debris" in table.stdout


def test_list_shows_the_real_size_of_stray_files(ws: Workspace) -> None:
    series = ws.checkpoints_dir / "default"
    series.mkdir(parents=True)
    (series / "notes.txt").write_bytes(b"n" * 1500)  # a file in a series folder
    (ws.checkpoints_dir / "README.md").write_bytes(b"r" * 700)  # one beside the series
    (series / "link").symlink_to(series / "notes.txt")  # a link counts as nothing
    result = cli("checkpoints", "list", "--json")
    assert result.exit_code == 0, result.output
    sizes = {Path(o["path"]).name: o["size"] for o in json.loads(result.stdout)["other"]}
    assert sizes == {"notes.txt": 1500, "README.md": 700, "link": 0}
    table = cli("checkpoints", "list").stdout
    assert "1.5 KiB" in table and "700 B" in table, table


def test_list_of_a_folder_without_workspace_is_empty(project: Path) -> None:
    result = cli("checkpoints", "list")
    assert result.exit_code == 0 and "no committed checkpoints" in result.stdout
    assert not (project / ".accelerate").exists()


# -- show -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_show_the_manifest_and_what_the_state_holds(saved: dict[str, Any], ws: Workspace) -> None:
    result = cli("checkpoints", "show", "20", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    folder = ws.checkpoints_dir / "default" / "step-000000000020"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert data["files"] == manifest["files"] and data["created"] == manifest["created"]
    assert (data["series"], data["step"], data["tag"]) == ("default", 20, "best")
    assert data["extra_keys"] == ["loss", "epoch"] and data["models"] == 1
    assert {"step", "models", "optimizers", "extra"} <= set(data["state_keys"])
    plain = cli("checkpoints", "show", "step-000000000005")
    assert plain.exit_code == 0, plain.output
    assert "plain step 5" in plain.stdout and "state keys" in plain.stdout
    assert manifest["files"][STATE_TENSORS]["checksum"] not in plain.stdout  # another step
    shown = cli("checkpoints", "show", "20").stdout
    assert manifest["files"][STATE_TENSORS]["checksum"] in shown and "loss, epoch" in shown


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "30"], "no checkpoint at step 30; there are default: steps 10, 20"),
        (["show", "ten"], "invalid checkpoint step 'ten'"),
        (["show", "step-12"], "invalid checkpoint step 'step-12'"),
        (["show", "5", "--series", "default"], "no checkpoint at step 5 in series 'default'"),
        (["show", "5", "--series", "../x"], "invalid run name '../x'"),
        (["verify", "31"], "no checkpoint at step 31"),
        (["rm", "31", "--yes"], "no checkpoint at step 31"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    saved: dict[str, Any], ws: Workspace, args: list[str], message: str
) -> None:
    before = sorted(p.name for p in (ws.checkpoints_dir / "default").iterdir())
    result = cli("checkpoints", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in (ws.checkpoints_dir / "default").iterdir()) == before


def test_a_step_in_two_series_needs_series(ws: Workspace) -> None:
    for name in ("a", "b"):
        Checkpoints(ws.layout, ws.settings.checkpoints, series=name).save({"w": torch.ones(2)}, 7)
    result = cli("checkpoints", "show", "7")
    assert result.exit_code == 2 and "several series (a, b): pass --series" in result.stderr
    assert json.loads(cli("checkpoints", "show", "7", "-s", "b", "--json").stdout)["series"] == "b"


def test_latest_names_the_newest_checkpoint_as_it_names_the_newest_run(
    ws: Workspace, tmp_path: Path
) -> None:
    """`accel logs latest` and `accel runs show latest` take `latest`; the checkpoint
    commands said "invalid checkpoint step 'latest'". rm still wants the number."""
    from safetensors.torch import load_file

    for step in (5, 9):
        ws.checkpoints.save({"model": {"w": torch.full((2,), float(step))}}, step)
    assert json.loads(cli("checkpoints", "show", "latest", "--json").stdout)["step"] == 9
    # `checkpoints show` alone, as `runs show` alone shows the newest run (it said
    # "Missing argument 'STEP'", while export and verify took no STEP)
    assert json.loads(cli("checkpoints", "show", "--json").stdout)["step"] == 9
    verified = json.loads(cli("checkpoints", "verify", "latest", "--json").stdout)
    assert [c["step"] for c in verified["checkpoints"]] == [9]
    assert len(json.loads(cli("checkpoints", "verify", "--json").stdout)["checkpoints"]) == 2
    out = tmp_path / "w.safetensors"
    assert cli("checkpoints", "export", "Latest", "-o", str(out)).exit_code == 0
    assert load_file(str(out))["w"].tolist() == [9.0, 9.0]
    for args, message in (
        (["show", "newest"], "use a number such as 1200 or `latest`"),
        (["rm", "latest", "--yes"], "takes the step to remove as a number, not `latest`"),
    ):
        result = cli("checkpoints", *args)
        assert result.exit_code == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert [f.path.name for f in ws.checkpoints.view().checkpoints] == [
        "step-000000000005",
        "step-000000000009",
    ]


# -- verify -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_verify_all_match_then_a_flipped_byte_fails_naming_the_file(
    saved: dict[str, Any], ws: Workspace, accel_exe: list[str]
) -> None:
    ok = run(accel_exe, "checkpoints", "verify")
    assert ok.returncode == 0, ok.stderr
    assert "verified 3 checkpoint(s)" in ok.stdout and "all match" in ok.stdout
    victim = ws.checkpoints_dir / "default" / "step-000000000010" / STATE_TENSORS
    flip_byte(victim)
    bad = run(accel_exe, "checkpoints", "verify")
    assert bad.returncode == 1
    assert f"error: {victim} fails its checksum" in bad.stderr and "default/step 10" in bad.stderr
    assert "1 of 3 checkpoint(s) failed verification" in bad.stdout
    assert run(accel_exe, "checkpoints", "verify", "20").returncode == 0
    data = json.loads(run(accel_exe, "checkpoints", "verify", "10", "--json").stdout)
    assert data["ok"] is False
    assert data["checkpoints"][0]["problems"][0]["file"] == STATE_TENSORS


@pytest.mark.slow
def test_verify_fails_on_a_missing_or_truncated_file_and_an_unreadable_manifest(
    saved: dict[str, Any], ws: Workspace
) -> None:
    folder = ws.checkpoints_dir / "default" / "step-000000000010"
    (folder / "rank-0.tensors").unlink()
    state = folder / STATE_TENSORS
    state.write_bytes(state.read_bytes()[:-1])
    result = cli("checkpoints", "verify", "10", "--json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["checkpoints"][0]["problems"]
    assert {p["file"]: p["problem"] for p in problems} == {
        "rank-0.tensors": "is missing",
        STATE_TENSORS: f"has {state.stat().st_size} bytes, its manifest says "
        f"{state.stat().st_size + 1}",
    }
    other = ws.checkpoints_dir / "plain" / "step-000000000005" / "manifest.json"
    other.write_text(other.read_text().replace('"format": 1', '"format": 9'))
    result = cli("checkpoints", "verify", "--series", "plain")
    assert result.exit_code == 1 and "upgrade accel" in result.stderr
    result = cli("checkpoints", "verify", "5", "--series", "plain")
    assert result.exit_code == 1 and "upgrade accel" in result.stderr


@pytest.mark.slow
def test_verify_reports_files_the_manifest_does_not_list(
    saved: dict[str, Any], ws: Workspace
) -> None:
    folder = ws.checkpoints_dir / "default" / "step-000000000020"
    (folder / "added-by-hand.txt").write_text("x")
    result = cli("checkpoints", "verify", "20")
    assert result.exit_code == 0 and "added-by-hand.txt is not in the manifest" in result.stderr


@pytest.mark.slow
def test_verify_shows_a_progress_bar_on_a_terminal(ws: Workspace, accel_exe: list[str]) -> None:
    import pty

    ws.checkpoints.save({"w": torch.zeros(16 << 20, dtype=torch.uint8)}, 1)
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout and stderr are the terminal
        os.execv(accel_exe[0], [*accel_exe, "checkpoints", "verify"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"verifying" in out and b"all match" in out


# -- export -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_export_round_trip_bit_for_bit(
    saved: dict[str, Any], tmp_path: Path, accel_exe: list[str]
) -> None:
    from safetensors.torch import load_file

    expected = saved["state"]
    out = tmp_path / "out"
    out.mkdir()
    st = run(
        accel_exe, "checkpoints", "export", "--series", "default", "-o", str(out / "m.safetensors")
    )
    assert st.returncode == 0, st.stderr
    assert "from default step 20: models.0" in st.stdout
    pt = cli("checkpoints", "export", "20", "--format", "pt", "-o", str(out / "m.bin"), "--json")
    assert pt.exit_code == 0, pt.output
    assert json.loads(pt.stdout)["tensors"] == len(expected)
    for loaded in (
        load_file(str(out / "m.safetensors")),
        torch.load(out / "m.bin", weights_only=True),
    ):
        assert sorted(loaded) == sorted(expected)  # safetensors orders by dtype, then name
        assert all(same_bits(loaded[k], expected[k]) for k in expected)
    plain = cli("checkpoints", "export", "5", "-o", str(out / "plain.pt"))
    assert plain.exit_code == 0 and "the whole state" in plain.stdout
    loaded = torch.load(out / "plain.pt", weights_only=True)
    assert all(same_bits(loaded[k], expected[k]) for k in expected) and len(loaded) == len(expected)
    older = cli(
        "checkpoints", "export", "10", "--series", "default", "-o", str(out / "10.safetensors")
    )
    assert older.exit_code == 0
    assert not same_bits(load_file(str(out / "10.safetensors"))["0.weight"], expected["0.weight"])
    assert sorted(p.name for p in out.iterdir()) == [
        "10.safetensors",
        "m.bin",
        "m.safetensors",
        "plain.pt",
    ]


@pytest.mark.slow
def test_export_refuses_to_overwrite_a_folder_and_a_bad_format(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    target = tmp_path / "m.safetensors"
    target.write_bytes(b"keep me")
    cases = [
        (["20", "-o", str(target)], "exists: pass --force"),
        (["20", "-o", str(tmp_path)], "is a folder: give a file name"),
        (["20", "-o", str(tmp_path / "no" / "m.pt")], "does not exist: create it first"),
        (["20", "-o", str(tmp_path / "m.onnx")], "cannot tell the format"),
        (["20", "-o", str(tmp_path / "m.pt"), "--format", "onnx"], "invalid --format 'onnx'"),
        (
            ["20", "-o", str(tmp_path / "m.pt"), "--model", "models.7"],
            "--model 'models.7' names no",
        ),
        (["20", "-o", str(tmp_path / "m.pt"), "--model", "a..b"], "invalid --model 'a..b'"),
        (["-o", str(tmp_path / "m.pt")], "several series have checkpoints (default, plain)"),
    ]
    for args, message in cases:
        result = cli("checkpoints", "export", *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, args
    assert target.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "project") == [
        "home",
        "m.safetensors",
    ]
    forced = cli("checkpoints", "export", "20", "-s", "default", "-o", str(target), "--force")
    assert forced.exit_code == 0, forced.output
    assert target.read_bytes() != b"keep me" and target.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.slow
def test_export_refuses_a_corrupt_checkpoint_and_writes_nothing(
    saved: dict[str, Any], ws: Workspace, tmp_path: Path, accel_exe: list[str]
) -> None:
    victim = ws.checkpoints_dir / "default" / "step-000000000020" / "rank-0.tensors"
    flip_byte(victim)
    result = run(accel_exe, "checkpoints", "export", "20", "-o", str(tmp_path / "m.safetensors"))
    assert result.returncode == 1
    assert f"{victim} fails its checksum" in result.stderr and "nothing exported" in result.stderr
    assert not any(
        p.suffix == ".safetensors" or p.name.startswith(".accel-tmp") for p in tmp_path.iterdir()
    )


@pytest.mark.slow
def test_export_without_safetensors_says_how_to_get_it(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    code = (
        "import sys; sys.modules['safetensors'] = None\n"
        "from accel.cli.main import main\n"
        f"sys.exit(main(['checkpoints', 'export', '20', '-o', {str(tmp_path / 'm.safetensors')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "pip install 'accel-workspace[safetensors]'" in result.stderr
    assert not (tmp_path / "m.safetensors").exists()


def test_export_picks_the_model_of_a_plain_dict_or_asks_for_a_key(
    ws: Workspace, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    net = model()
    ws.checkpoints.save({"model": net.state_dict(), "optimizer": {"lr": 0.1}, "step": 3}, 3)
    ws.checkpoints.save({"encoder": net.state_dict(), "lr": 0.1}, 4)
    result = cli("checkpoints", "export", "3", "-o", str(tmp_path / "3.safetensors"))
    assert result.exit_code == 0 and ": model" in result.stdout
    assert set(load_file(str(tmp_path / "3.safetensors"))) == set(net.state_dict())
    refused = cli("checkpoints", "export", "4", "-o", str(tmp_path / "4.safetensors"))
    assert refused.exit_code == 2
    assert "top-level keys are 'encoder', 'lr'" in refused.stderr and "--model" in refused.stderr
    chosen = cli(
        "checkpoints", "export", "4", "-o", str(tmp_path / "4.safetensors"), "-m", "encoder"
    )
    assert chosen.exit_code == 0
    loaded = load_file(str(tmp_path / "4.safetensors"))
    assert all(same_bits(loaded[k], v) for k, v in net.state_dict().items())


SHARDED_SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import accel

    acc = accel.Accelerator()
    mesh = init_device_mesh("cpu", (acc.world_size,))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    full = net.state_dict()
    sharded = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}
    assert sharded["0.weight"].to_local().shape == (8, 8)  # each rank holds half
    acc.workspace.checkpoints.save({"step": 9}, 9, sharded={"models": [sharded]})
    if acc.is_main_process:
        torch.save(full, acc.workspace.path.parent / "full.pt")
    acc.end()
    """
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_export_consolidates_a_checkpoint_sharded_over_two_ranks(
    ws: Workspace, project: Path, tmp_path: Path, accel_exe: list[str]
) -> None:
    from safetensors.torch import load_file

    script = project / "shard.py"
    script.write_text(SHARDED_SCRIPT)
    launched = run(accel_exe, "launch", "-n", "2", "--cpu", str(script))
    assert launched.returncode == 0, launched.stdout + launched.stderr
    shown = json.loads(cli("checkpoints", "show", "9", "--json").stdout)
    assert shown["sharded"] and shown["world_size"] == 2
    assert {"sharded/__0_0.distcp", "sharded/__1_0.distcp"} <= set(shown["files"])
    out = tmp_path / "m.safetensors"
    result = run(accel_exe, "checkpoints", "export", "9", "-o", str(out), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["origin"] == "sharded"
    full = torch.load(project / "full.pt", weights_only=True)
    loaded = load_file(str(out))
    assert sorted(loaded) == sorted(full) and all(same_bits(loaded[k], full[k]) for k in full)
    flip_byte(
        ws.checkpoints_dir / "default" / "step-000000000009" / "sharded" / "__1_0.distcp", 200
    )
    refused = run(accel_exe, "checkpoints", "export", "9", "-o", str(out), "--force")
    assert refused.returncode == 1 and "__1_0.distcp fails its checksum" in refused.stderr


# -- rm ---------------------------------------------------------------------------------------


def _steps(ws: Workspace, series: str = "default") -> list[str]:
    return sorted(p.name for p in (ws.checkpoints_dir / series).iterdir())


@pytest.mark.slow
def test_rm_plans_then_removes_and_keeps_the_newest_without_force(
    saved: dict[str, Any], ws: Workspace, accel_exe: list[str]
) -> None:
    before = _steps(ws)
    newest = run(accel_exe, "checkpoints", "rm", "20", "--yes")
    assert newest.returncode == 2 and "newest checkpoint of series 'default'" in newest.stderr
    dry = run(accel_exe, "checkpoints", "rm", "10", "--dry-run")
    assert dry.returncode == 0 and "default/step-000000000010" in dry.stdout
    asks = run(accel_exe, "checkpoints", "rm", "10")  # no terminal, no --yes
    assert asks.returncode == 2 and "pass --yes" in asks.stderr
    assert _steps(ws) == before
    gone = run(accel_exe, "checkpoints", "rm", "10", "--yes", "--json")
    assert gone.returncode == 0, gone.stderr
    assert [r["name"] for r in json.loads(gone.stdout)["removed"]] == ["default/step-000000000010"]
    assert _steps(ws) == ["step-000000000020"]
    forced = cli("checkpoints", "rm", "20", "--force", "--yes")
    assert forced.exit_code == 0, forced.output
    assert "default" not in cli("checkpoints", "list").stdout.split()
    log = (ws.logs_dir / "training.log").read_text()
    assert "accel checkpoints rm: removed 1 item(s) (default/step-000000000010)" in log


HOLDER = textwrap.dedent(
    """
    import sys, time
    from accel.workspace import Workspace
    from accel.store.lease import SeriesLease
    lease = SeriesLease(Workspace(sys.argv[1]).layout, "default", "20990101-000000-abcdef").acquire()
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_rm_never_touches_a_series_a_live_process_holds(
    saved: dict[str, Any], ws: Workspace, accel_exe: list[str]
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ws.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        before = _steps(ws)
        for args in (["10", "--yes"], ["20", "--yes", "--force"], ["10", "--dry-run"]):
            result = run(accel_exe, "checkpoints", "rm", *args)
            assert result.returncode == 1, result.stdout + result.stderr
            assert f"is held by pid {holder.pid}" in result.stderr
            assert "20990101-000000-abcdef" in result.stderr
        assert _steps(ws) == before
        listed = json.loads(run(accel_exe, "checkpoints", "list", "--json").stdout)
        assert all(c["series_in_use"] for c in listed["checkpoints"] if c["series"] == "default")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The kernel released the lease with the holder: now it may go.
    assert run(accel_exe, "checkpoints", "rm", "10", "--yes").returncode == 0
    assert _steps(ws) == ["step-000000000020"]


@pytest.mark.slow
def test_rm_never_follows_a_linked_series_folder(
    saved: dict[str, Any], ws: Workspace, tmp_path: Path
) -> None:
    import shutil

    outside = tmp_path / "elsewhere"
    shutil.copytree(ws.checkpoints_dir / "default", outside)
    (ws.checkpoints_dir / "linked").symlink_to(outside)
    result = cli("checkpoints", "rm", "10", "--series", "linked", "--yes")
    assert result.exit_code == 2 and "no checkpoint at step 10 in series 'linked'" in result.stderr
    assert sorted(p.name for p in outside.iterdir()) == ["step-000000000010", "step-000000000020"]
    listed = json.loads(cli("checkpoints", "list", "--json").stdout)
    assert {Path(o["path"]).name: o["kind"] for o in listed["other"] if o["series"] is None} == {
        "linked": "unknown"
    }


@pytest.mark.slow
def test_list_show_verify_and_rm_do_not_import_torch(saved: dict[str, Any]) -> None:
    result = runs_without_heavy_imports(
        ("checkpoints", "list"),
        ("checkpoints", "show", "20", "-s", "default"),
        ("checkpoints", "verify"),
        ("checkpoints", "rm", "10", "--dry-run"),
    )
    assert result.returncode == 0, result.stderr


KILLED_EXPORT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from accel import _faults
    from accel.admin.export import ExportRequest, export
    from accel.workspace import Workspace

    def hook(name):
        print(name, flush=True)
        if name == sys.argv[2]:
            os.kill(os.getpid(), signal.SIGKILL)

    _faults.set_hook(hook)
    request = ExportRequest(Path(sys.argv[1]), step=20, series="default", force=True)
    export(Workspace.discover(), request)
    """
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_export_killed_at_every_step_leaves_the_old_file_or_the_new_one(
    saved: dict[str, Any], project: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    def export_killed_at(output: Path, point: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", KILLED_EXPORT, str(output), point],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
        )

    expected = saved["state"]
    whole = export_killed_at(tmp_path / "whole.safetensors", "none")
    assert whole.returncode == 0, whole.stderr
    points = whole.stdout.split()
    assert points == ["export.temp-created", "export.written", "export.published"]
    for point in points:
        for existed in (False, True):
            out = tmp_path / point / "m.safetensors"
            out.parent.mkdir(exist_ok=True)
            if existed:
                out.write_bytes(b"the old file")
            killed = export_killed_at(out, point)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            if point != "export.published":  # written or not, it is not visible yet
                assert out.read_bytes() == b"the old file" if existed else not out.exists()
            else:  # the new file, whole
                loaded = load_file(str(out))
                assert all(same_bits(loaded[k], expected[k]) for k in expected), point
            out.unlink(missing_ok=True)
