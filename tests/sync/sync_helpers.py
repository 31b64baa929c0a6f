"""Helpers shared by the sync tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accel import Workspace


def save_checkpoints(ws: Workspace, steps: tuple[int, ...] = (1, 2)) -> dict[int, Any]:
    """Real checkpoints through the store; returns the state saved per step."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    states = {}
    for step in steps:
        state = {"w": torch.randn(64, 32, generator=gen), "step": step}
        ws.checkpoints.save(state, step)
        states[step] = state
    return states


def finished_run(ws: Workspace, run_id: str = "20261129-150000-aaaaaa") -> Path:
    folder = ws.runs_dir / run_id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"id": run_id, "status": "succeeded"}))
    (folder / "rank-0.log").write_text("epoch 0 loss 1.0\n")
    return folder


def tree(root: Path) -> dict[str, bytes]:
    """Relative path -> content of every file under ``root``."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def checkpoint_file_count(ws: Workspace) -> int:
    """Files of the committed checkpoints, manifests included (the store picks the names)."""
    return sum(len(info.files) + 1 for info in ws.checkpoints.all())


def forge(remote_dir: Path, rel: str, data: bytes | None, checksum: str | None = None) -> None:
    """Plant (or, with None, remove) ``rel`` on a file:// remote, index entry included:
    what a hostile or broken remote holds, with checksums that match it."""
    import xxhash

    index_path = remote_dir / "accel-sync.json"
    index = json.loads(index_path.read_text())
    target = remote_dir / rel
    if data is None:
        target.unlink(missing_ok=True)
        index["files"].pop(rel, None)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        digest = checksum or f"xxh3_64:{xxhash.xxh3_64(data).hexdigest()}"
        index["files"][rel] = {"size": len(data), "checksum": digest}
    index_path.write_text(json.dumps(index))


def remote_json(remote_dir: Path, rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((remote_dir / rel).read_text())
    return data


class Interrupt:
    """A progress reporter that interrupts the push once ``limit`` bytes have moved."""

    def __init__(self, limit: int) -> None:
        self.limit, self.seen = limit, 0

    def begin(self, total_bytes: int, total_files: int) -> None:
        pass

    def advance(self, num_bytes: int) -> None:
        self.seen += num_bytes
        if self.seen > self.limit:
            raise KeyboardInterrupt

    def end(self) -> None:
        pass


@contextlib.contextmanager
def http_server(
    folder: Path, status: int | None = None, *, suffix: str = "", location: str = ""
) -> Iterator[str]:
    """A web server in a thread serving ``folder``; its URL. With ``status``, every HEAD
    and GET of a path ending in ``suffix`` is answered ``status`` (a redirect to
    ``location`` when given)."""
    import functools
    import http.server
    import threading

    class Handler(http.server.SimpleHTTPRequestHandler):
        def send_head(self) -> Any:
            if status is None or not self.path.endswith(suffix):
                return super().send_head()
            if not location:
                self.send_error(status)
                return None
            self.send_response(status)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Counted:
    """A progress reporter that counts the bytes a sync read (and can act as it begins)."""

    def __init__(self, on_begin: Any = None) -> None:
        self.seen, self._on_begin = 0, on_begin

    def begin(self, total_bytes: int, total_files: int) -> None:
        if self._on_begin is not None:
            self._on_begin()

    def advance(self, num_bytes: int) -> None:
        self.seen += num_bytes

    def end(self) -> None:
        pass
