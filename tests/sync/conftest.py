"""Fixtures for the sync tests: a workspace with state, a file:// remote, an S3 server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accel import Workspace
from accel.cli.main import main

pytest.importorskip("fsspec")


@pytest.fixture
def ws(ws: Workspace) -> Workspace:
    assert main(["config", "--default"]) == 0
    return ws


@pytest.fixture
def remote_dir(tmp_path: Path) -> Path:
    return tmp_path / "remote"


@pytest.fixture
def remote_url(remote_dir: Path) -> str:
    return remote_dir.as_uri()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """A real S3 protocol server (moto) on loopback; yields its endpoint URL."""
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Fake credentials in the environment (the backend's usual source); a fresh bucket."""
    import uuid

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("ACCEL_SYNC_ENDPOINT_URL", s3_server)
    bucket = f"accel-{uuid.uuid4().hex[:10]}"
    import s3fs

    s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True).mkdir(bucket)
    return bucket
