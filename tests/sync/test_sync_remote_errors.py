"""What a remote answers instead of a file, and URLs and indexes accel does not take: one
line each, saying what went wrong (never "a file vanished", never "nothing was pushed")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sync_helpers import http_server, save_checkpoints

from accel import Workspace
from accel.cli.main import main
from accel.errors import IntegrityError, UsageError

pytestmark = pytest.mark.timeout(60)


def pull_err(workspace: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The pull's exit code and its one error line."""
    capsys.readouterr()
    code = main(["--workspace", str(workspace), "sync", "pull", *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return code, lines[0]


@pytest.fixture
def served(ws: Workspace, tmp_path: Path) -> Path:
    """A folder a checkpoint was pushed to, for a web server to serve."""
    pytest.importorskip("aiohttp", reason="fsspec's http:// needs aiohttp (s3fs brings it)")
    save_checkpoints(ws, (1,))
    folder = tmp_path / "served"
    assert main(["--workspace", str(ws.path), "sync", "push", folder.as_uri()]) == 0
    return folder


@pytest.mark.parametrize("status", [500, 403])
def test_a_server_error_on_a_file_is_the_servers_error_not_a_vanished_file(
    served: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int
) -> None:
    """fsspec's http:// turns a failed request into FileNotFoundError: a 500 on a file
    said "a file vanished while it was synced"."""
    fresh = tmp_path / "fresh" / ".accelerate"
    with http_server(served, status, suffix=".tensors") as url:
        code, err = pull_err(fresh, capsys, url)
    assert code == 1 and err.startswith(f"error: {url}: ClientResponseError: {status}"), err
    assert Workspace(fresh).checkpoints.list() == []


def test_a_redirect_to_a_host_that_cannot_be_reached_says_so(
    served: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from run_helpers import free_port

    elsewhere = f"http://127.0.0.1:{free_port()}/state.tensors"  # nothing listens there
    fresh = tmp_path / "fresh" / ".accelerate"
    with http_server(served, 302, suffix=".tensors", location=elsewhere) as url:
        code, err = pull_err(fresh, capsys, url)
    assert code == 1 and err.startswith(f"error: {url}: cannot reach the remote: "), err


def test_a_storage_option_http_does_not_take_is_its_error_not_an_empty_remote(
    served: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """aiohttp takes -o options at the first request: its TypeError said "nothing was
    pushed to ... (no accel-sync.json there)", exit 2."""
    fresh = tmp_path / "fresh" / ".accelerate"
    with http_server(served) as url:
        code, err = pull_err(fresh, capsys, url, "--dry-run", "-o", "bogus=1")
    assert code == 1 and err.startswith(f"error: {url}: TypeError: "), err
    assert "unexpected keyword argument 'bogus'" in err, err


def test_an_error_fsspec_hides_behind_not_found_is_not_taken_for_an_empty_remote() -> None:
    """A port out of range (a ValueError of the first request) read as "no index there"."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from accel.sync._remote import Remote

    url = "http://127.0.0.1:99999/x"
    remote = Remote(fsspec.filesystem("http", skip_instance_cache=True), url, url)
    with pytest.raises(ValueError, match="out of range"):
        remote.read_index()


HOSTLESS = {
    "https://alice:s3cr3t@/team/run": "names no host",
    "https://alice:s3cr3t@:8443/x": "names no host",
    "ftp://u:s3cr3t@/backup": "names no host",
    "http://[]/x": "names no host",
    "http://127.0.0.1:99999/": "port is 1 to 65535",
    "https://host:0/x": "port is 1 to 65535",
    "http://host:80a/x": "port is 1 to 65535",
}


@pytest.mark.parametrize("url", sorted(HOSTLESS))
def test_a_url_with_no_host_or_no_port_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """They said "nothing was pushed to ..." (exit 2) or asked DNS for an empty name."""
    fresh = tmp_path / "fresh" / ".accelerate"
    code, err = pull_err(fresh, capsys, url, "--dry-run")
    assert code == 2 and HOSTLESS[url] in err and "://host" in err, err
    assert "s3cr3t" not in err and "alice" not in err and "nothing was pushed" not in err, err
    assert not fresh.exists()


def test_the_gcs_credentials_hint_survives_redaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o token=anon` was shown as `-o token=***`, its ')' swallowed with it."""
    code, err = pull_err(tmp_path / ".accelerate", capsys, "gs://user:s3cr3t@bucket/x")
    assert code == 2 and err.endswith("(a public bucket: set the storage option token to anon)")
    assert "***)" not in err.replace("gs://***@", "")


def index(version: Any) -> bytes:
    return json.dumps({"format": "accel-sync", "version": version, "files": {}}).encode()


def test_an_index_version_is_one_accel_reads_a_newer_one_or_a_damaged_index() -> None:
    """ "1" said "written by a newer accel; upgrade"; 0, -5 and true were read as 1."""
    from accel.sync._remote import parse_index

    for version in ("1", 0, -5, True, None, 1.0, [1]):
        with pytest.raises(IntegrityError, match=r"^file:///r/accel-sync.json is damaged \("):
            parse_index(index(version), "file:///r")
    with pytest.raises(UsageError, match="written by a newer accel; upgrade accel"):
        parse_index(index(2), "file:///r")
    assert parse_index(index(1), "file:///r") == {}
