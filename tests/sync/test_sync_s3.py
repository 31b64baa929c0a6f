"""``accel sync`` against a real S3 protocol server (moto) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sync_helpers import checkpoint_file_count, finished_run, save_checkpoints, tree

from accel import Workspace
from accel.cli.main import main

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]


def test_push_pull_through_s3_is_bit_identical_and_incremental(
    ws: Workspace, s3_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    states = save_checkpoints(ws)
    finished_run(ws)
    url = f"s3://{s3_env}/projects/demo"
    assert main(["sync", "push", url]) == 0
    capsys.readouterr()
    assert main(["sync", "push", url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    total = checkpoint_file_count(ws) + 2 + 1
    assert again["transferred_files"] == 0 and again["unchanged_files"] == total

    fresh = tmp_path / "fresh" / ".accelerate"
    assert main(["--workspace", str(fresh), "sync", "pull", url]) == 0
    pulled = Workspace(fresh)
    for step, state in states.items():
        assert torch.equal(pulled.checkpoints.load(step)["w"], state["w"])
    assert tree(fresh / "checkpoints") == tree(ws.path / "checkpoints")
    assert tree(fresh / "logs/runs") == tree(ws.runs_dir)


def test_the_installed_command_with_credentials_from_the_environment(
    ws: Workspace, s3_env: str, s3_server: str, tmp_path: Path, accel_exe: list[str]
) -> None:
    save_checkpoints(ws, (1,))
    url = f"s3://{s3_env}/p"
    env = {**os.environ, "ACCEL_SYNC_ENDPOINT_URL": "", "AWS_ENDPOINT_URL": s3_server}
    push = subprocess.run(
        [*accel_exe, "sync", "push", url], env=env, capture_output=True, text=True, timeout=60
    )
    assert push.returncode == 0, push.stderr
    assert f"pushed {checkpoint_file_count(ws) + 1} files" in push.stdout
    log = (ws.logs_dir / "training.log").read_text()
    assert "sync push s3://" in log and "testing-secret" not in log

    # a tampered object is refused; nothing of that checkpoint becomes visible
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True)
    info = ws.checkpoints.get(1)
    assert info is not None
    key = f"{s3_env}/p/checkpoints/default/step-000000000001/{info.files[0]}"
    fs.pipe_file(key, b"\0" + fs.cat_file(key)[1:])
    fresh = tmp_path / "fresh" / ".accelerate"
    pull = subprocess.run(
        [*accel_exe, "-w", str(fresh), "sync", "pull", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert pull.returncode == 1 and "refused" in pull.stderr
    assert Workspace(fresh).checkpoints.list() == []


def test_missing_credentials_are_one_line_saying_what_to_give(
    ws: Workspace,
    s3_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # botocore's bare "NoCredentialsError: Unable to locate credentials" named no source.
    save_checkpoints(ws, (1,))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance to ask
    import s3fs

    # fsspec keeps one filesystem per arguments in a process: an earlier test's holds the
    # credentials it read then (a command line is a process of its own)
    s3fs.S3FileSystem.clear_instance_cache()
    capsys.readouterr()
    assert main(["sync", "push", f"s3://{s3_env}/p"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "NoCredentialsError: Unable to locate credentials; give S3 credentials: " in err
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE" in err
    listed = s3fs.S3FileSystem(
        endpoint_url=os.environ["ACCEL_SYNC_ENDPOINT_URL"],
        key="testing-key-id",
        secret="testing-secret",
        skip_instance_cache=True,
    ).ls(s3_env)
    assert listed == []  # nothing pushed
