"""Per-rank output: ``rank-N.log`` in the run folder and rank-prefixed console lines.

Each local worker writes its stdout *and* stderr into one FIFO owned by the launcher
(torch's elastic agent opens the "log file" we name, which is that FIFO). A pump
thread reads them all, appends every line to ``rank-<global rank>.log`` across
attempts, and hands the lines the console should show to a callback. Because the
launcher holds the read end, nothing a worker wrote is lost when it dies. Beside each
log, ``rank-N.log.idx`` maps byte offsets to times (``accel logs --since``), and
:meth:`LogRouter.last_output` tells the hang watch when each rank last wrote.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from accel.fsutil import open_private_append
from accel.runview.logs import LogIndexWriter

ConsoleSink = Callable[[int, str], None]
TAIL_LINES = 200
_CHUNK = 65536


class LogRouter:
    """Owns the FIFOs of one node's local ranks and the pump thread that drains them."""

    def __init__(
        self,
        run_dir: Path,
        fifo_dir: Path,
        nproc: int,
        sink: ConsoleSink | None,
        show: Callable[[int], bool],
        secrets: Sequence[str] = (),
    ) -> None:
        self.run_dir = run_dir
        # Values a worker may print (its tokens, URL passwords): hidden in logs and console.
        self._secrets = tuple(s.encode("utf-8", "surrogateescape") for s in secrets)
        self._sink = sink
        self._show = show
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fifos = [fifo_dir / f"local-{i}.pipe" for i in range(nproc)]
        self._fds: dict[int, int] = {}
        self._partial: dict[int, bytes] = {}
        self._global: dict[int, int] = {i: i for i in range(nproc)}
        self._files: dict[int, BinaryIO] = {}
        self._indexes: dict[int, LogIndexWriter] = {}
        self._last_output: dict[int, float] = {}  # rank -> when it last wrote anything
        self.tails: dict[int, deque[str]] = {}
        self._thread = threading.Thread(target=self._pump, name="accel-log-pump", daemon=True)
        self._wake_r, self._wake_w = os.pipe()  # close() wakes the pump at once

    @property
    def fifos(self) -> list[Path]:
        return list(self._fifos)

    def start(self) -> LogRouter:
        for local, path in enumerate(self._fifos):
            os.mkfifo(path, 0o600)
            # O_RDWR: we are a writer too, so the FIFO never reports EOF between attempts.
            self._fds[local] = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread.start()
        return self

    def begin_attempt(self, local_to_global: Mapping[int, int], restart: int) -> None:
        """Before workers (re)start: drain the last attempt, mark the logs, map the ranks."""
        with self._lock:
            self._drain_all()
            self._global = dict(local_to_global)
            for rank in self._global.values():
                self._file(rank)
                if restart:
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                    self._write(rank, f"===== accel: restart {restart} at {stamp} =====\n")

    def close(self) -> None:
        """Drain what is left, flush partial lines, close everything."""
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            self._drain_all()
            for local in list(self._partial):
                self._emit(local, self._partial.pop(local) + b"\n")
            for fd in (*self._fds.values(), self._wake_r, self._wake_w):
                os.close(fd)
            self._fds.clear()
            for fh in self._files.values():
                fh.close()
            self._files.clear()
        for path in self._fifos:
            with contextlib.suppress(OSError):
                path.unlink()

    def tail(self, rank: int, lines: int = 40) -> list[str]:
        return list(self.tails.get(rank, ()))[-lines:]

    # -- pump --------------------------------------------------------------------------

    def _pump(self) -> None:
        poller = select.poll()
        by_fd = {fd: local for local, fd in self._fds.items()}
        for fd in (*by_fd, self._wake_r):
            poller.register(fd, select.POLLIN)
        while not self._stop.is_set():
            ready = poller.poll(1000)
            if not ready:
                continue
            with self._lock:
                for fd, _ in ready:
                    if fd in by_fd and fd in self._fds.values():
                        self._drain(by_fd[fd])

    def _drain_all(self) -> None:
        for local in list(self._fds):
            self._drain(local)

    def _drain(self, local: int) -> None:
        while True:
            try:
                data = os.read(self._fds[local], _CHUNK)
            except BlockingIOError:
                return
            if not data:
                return
            self._last_output[self._global.get(local, local)] = time.time()
            data = self._partial.pop(local, b"") + data
            complete, _, rest = data.rpartition(b"\n")
            if rest:
                self._partial[local] = rest
            if complete:
                self._emit(local, complete + b"\n")

    def _emit(self, local: int, data: bytes) -> None:
        rank = self._global.get(local, local)
        for secret in self._secrets:  # whole lines only: a secret is never split
            data = data.replace(secret, b"***")
        self._write_bytes(rank, data)
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines()
        self.tails.setdefault(rank, deque(maxlen=TAIL_LINES)).extend(lines)
        if self._sink is not None and self._show(rank):
            try:
                for line in lines:
                    self._sink(rank, line)
            except (OSError, ValueError):  # console gone (closed pipe): the logs go on
                self._sink = None

    def _write(self, rank: int, text: str) -> None:
        self._write_bytes(rank, text.encode())

    def last_output(self) -> dict[int, float]:
        """``rank -> time`` of each rank's latest output, partial lines included."""
        return dict(self._last_output)

    def _write_bytes(self, rank: int, data: bytes) -> None:
        fh = self._file(rank)
        self._index(rank).note(fh.tell(), time.time())
        fh.write(data)
        fh.flush()

    def _index(self, rank: int) -> LogIndexWriter:
        if rank not in self._indexes:
            self._indexes[rank] = LogIndexWriter(self.run_dir / f"rank-{rank}.log")
        return self._indexes[rank]

    def _file(self, rank: int) -> BinaryIO:
        if rank not in self._files:
            fd = open_private_append(self.run_dir / f"rank-{rank}.log")
            self._files[rank] = open(fd, "ab")  # noqa: SIM115
        return self._files[rank]
