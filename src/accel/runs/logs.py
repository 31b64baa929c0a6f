"""Per-rank output: ``rank-N.log`` in the run folder and rank-prefixed console output.

Each local worker writes its stdout and its stderr into two FIFOs owned by the
launcher (torch's elastic agent opens the "log files" we name, which are those FIFOs).
A pump thread reads them all as the bytes arrive and cuts them into pieces
(:mod:`accel.runs.streams`): whole lines at once, partial lines after a short
quiet time, carriage-return redraws (progress bars) as they are drawn, thinned to
one a second in the log. Every piece is appended to ``rank-<global rank>.log`` across
attempts (stderr segments marked ``[stderr]``) and handed, with its stream, to the
console callback. Because the launcher holds the read ends, nothing a worker wrote is
lost when it dies. Beside each log, ``rank-N.log.idx`` maps byte offsets to times
(``accel logs --since``), and :meth:`LogRouter.last_output` tells the hang watch when
each rank last wrote. torchrun's ``--redirects`` keep a stream off the console, and
with ``--log-dir`` the same pieces also go to torchrun's files
(:mod:`accel.runs.torchrun_logs`).
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
from typing import BinaryIO, Protocol

from accel._fs import open_private_append
from accel.layout import rank_log
from accel.runs.logindex import LogIndexWriter
from accel.runs.streams import (
    LOG_REDRAW_EVERY,
    STDERR,
    STDOUT,
    Interleaver,
    Lines,
    Piece,
    Splitter,
    log_prefix,
)
from accel.runs.torchrun_logs import LogMirror, TorchrunLogs


class ConsoleSink(Protocol):
    """Where console output goes: ``(rank, "stdout" or "stderr", piece)``."""

    def __call__(self, rank: int, stream: str, piece: Piece) -> None: ...

    def redraw_every(self, stream: str) -> float:
        """At most one redraw of ``stream`` per this many seconds."""
        ...


STREAMS = (STDOUT, STDERR)
Hold = Callable[[bytes], int]
TAIL_LINES = 200
TAIL_BYTES = 1 << 16  # of a block of lines: enough for TAIL_LINES ordinary ones
_CHUNK = 65536
_IDLE_POLL = 1.0


class _Source:
    """One local worker's stdout or stderr: its FIFO and where its pieces go."""

    def __init__(self, fd: int, console_every: float | None, hold: Hold) -> None:
        self.fd = fd
        self.log = Splitter(LOG_REDRAW_EVERY, hold=hold)
        self.console = Splitter(console_every, hold=hold) if console_every is not None else None
        self.lines = Lines()


class _RankLog:
    """``rank-N.log`` and its time index; stdout and stderr lines kept apart."""

    def __init__(self, path: Path) -> None:
        # closed by LogRouter.close
        self.fh: BinaryIO = open(open_private_append(path), "ab")  # noqa: SIM115
        self.index = LogIndexWriter(path)
        self.interleave = Interleaver(log_prefix)

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.index.note(self.fh.tell(), time.time())
        self.fh.write(data)
        self.fh.flush()


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
        torchrun: TorchrunLogs | None = None,
    ) -> None:
        self.run_dir = run_dir
        # torchrun's --redirects (off the console) and, with --log-dir, its files (start)
        self._torchrun = torchrun or TorchrunLogs()
        self._mirror: LogMirror | None = None
        # Values a worker may print (its tokens, URL passwords): hidden in logs and console.
        self._secrets = tuple(s.encode("utf-8", "surrogateescape") for s in secrets)
        self._sink = sink
        self._show = show
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._paths = {
            (i, s): fifo_dir / f"local-{i}.{s}.pipe" for i in range(nproc) for s in STREAMS
        }
        self._sources: dict[tuple[int, str], _Source] = {}
        self._global: dict[int, int] = {i: i for i in range(nproc)}
        self._logs: dict[int, _RankLog] = {}
        self._last_output: dict[int, float] = {}  # rank -> when it last wrote anything
        self.tails: dict[int, deque[str]] = {}
        self._thread = threading.Thread(target=self._pump, name="accel-log-pump", daemon=True)
        self._wake_r, self._wake_w = os.pipe()  # close() wakes the pump at once

    @property
    def stdout_fifos(self) -> list[Path]:
        return [p for (_, s), p in sorted(self._paths.items()) if s == STDOUT]

    @property
    def stderr_fifos(self) -> list[Path]:
        return [p for (_, s), p in sorted(self._paths.items()) if s == STDERR]

    def start(self, mirror: LogMirror | None = None) -> LogRouter:
        self._mirror = mirror
        for key, path in self._paths.items():
            os.mkfifo(path, 0o600)
            # O_RDWR: we are a writer too, so the FIFO never reports EOF between attempts.
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            sink = self._sink if self._torchrun.on_console(*key) else None  # --redirects
            every = sink.redraw_every(key[1]) if sink is not None else None
            self._sources[key] = _Source(fd, every, self._secret_start)
        self._thread.start()
        return self

    def begin_attempt(self, local_to_global: Mapping[int, int], restart: int) -> None:
        """Before workers (re)start: drain the last attempt, mark the logs, map the ranks."""
        with self._lock:
            self._drain_all()
            self._end_streams()
            self._global = dict(local_to_global)
            if self._mirror is not None:
                self._mirror.begin_attempt(restart, self._global)
            for rank in self._global.values():
                log = self._log(rank)
                if restart:
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                    marker = f"===== accel: restart {restart} at {stamp} =====\n".encode()
                    log.write(log.interleave.end_line() + marker)

    def close(self) -> None:
        """Drain what is left, end partial lines, close everything."""
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with self._lock:
            self._drain_all()
            self._end_streams()
            for source in self._sources.values():
                os.close(source.fd)
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._sources.clear()
            for log in self._logs.values():
                log.fh.close()
            self._logs.clear()
            if self._mirror is not None:
                self._mirror.close()
        for path in self._paths.values():
            with contextlib.suppress(OSError):
                path.unlink()

    def tail(self, rank: int, lines: int = 40) -> list[str]:
        return list(self.tails.get(rank, ()))[-lines:]

    def last_output(self) -> dict[int, float]:
        """``rank -> time`` of each rank's latest output, partial lines included."""
        return dict(self._last_output)

    # -- pump --------------------------------------------------------------------------

    def _pump(self) -> None:
        poller = select.poll()
        by_fd = {source.fd: key for key, source in self._sources.items()}
        for fd in (*by_fd, self._wake_r):
            poller.register(fd, select.POLLIN)
        while not self._stop.is_set():
            ready = poller.poll(self._poll_timeout_ms())
            with self._lock:
                if self._stop.is_set():
                    return
                for fd, _ in ready:
                    if fd in by_fd:
                        self._drain(by_fd[fd])
                self._flush_due(time.monotonic())

    def _poll_timeout_ms(self) -> int:
        """Until the next partial line or held-back redraw is due (at most a second)."""
        with self._lock:
            due = [
                d
                for source in self._sources.values()
                for splitter in (source.log, source.console)
                if splitter is not None and (d := splitter.deadline()) is not None
            ]
        wait = min(due) - time.monotonic() if due else _IDLE_POLL
        return max(10, min(int(wait * 1000) + 1, int(_IDLE_POLL * 1000)))

    def _drain_all(self) -> None:
        for key in list(self._sources):
            self._drain(key)

    def _drain(self, key: tuple[int, str]) -> None:
        source = self._sources[key]
        while True:
            try:
                data = os.read(source.fd, _CHUNK)
            except BlockingIOError:
                return
            if not data:
                return
            now = time.monotonic()
            self._last_output[self._rank(key)] = time.time()
            self._to_log(key, source.log.feed(data, now))
            if source.console is not None:
                self._to_console(key, source.console.feed(data, now))

    def _flush_due(self, now: float) -> None:
        for key, source in self._sources.items():
            self._to_log(key, source.log.flush(now))
            if source.console is not None:
                self._to_console(key, source.console.flush(now))

    def _end_streams(self) -> None:
        """An attempt is over: what its workers left unfinished comes out, lines ended."""
        for key, source in self._sources.items():
            self._to_log(key, source.log.close())
            if source.console is not None:
                self._to_console(key, source.console.close())

    def _secret_start(self, partial: bytes) -> int:
        """How many trailing bytes of a partial line may be the start of a secret: held
        back when the stream goes quiet, so a secret always comes out whole and hidden."""
        longest = 0
        for secret in self._secrets:
            for n in range(min(len(secret) - 1, len(partial)), longest, -1):
                if partial.endswith(secret[:n]):
                    longest = n
                    break
        return longest

    def _scrub(self, pieces: list[Piece]) -> list[Piece]:
        if not self._secrets:
            return pieces
        out = []
        for piece in pieces:
            data = piece.data
            for secret in self._secrets:
                data = data.replace(secret, b"***")
            out.append(Piece(data, piece.end, piece.start, piece.redraw))
        return out

    def _to_log(self, key: tuple[int, str], pieces: list[Piece]) -> None:
        if not pieces:
            return
        pieces = self._scrub(pieces)
        rank, stream = self._rank(key), key[1]
        log, lines = self._log(rank), self._sources[key].lines
        log.write(b"".join(log.interleave.render(stream, p) for p in pieces))
        if self._mirror is not None:  # torchrun's file holds the stream as it was written
            self._mirror.write(key, b"".join(p.data + p.end for p in pieces))
        for piece in pieces:
            line = lines.add(piece)
            if line is not None:
                tail = self.tails.setdefault(rank, deque(maxlen=TAIL_LINES))
                tail.extend(line[-TAIL_BYTES:].decode("utf-8", errors="replace").split("\n"))

    def _to_console(self, key: tuple[int, str], pieces: list[Piece]) -> None:
        rank = self._rank(key)
        if self._sink is None or not pieces or not self._show(rank):
            return
        pieces = self._scrub(pieces)
        try:
            for piece in pieces:
                self._sink(rank, key[1], piece)
        except (OSError, ValueError):  # console gone (closed pipe): the logs go on
            self._sink = None

    def _rank(self, key: tuple[int, str]) -> int:
        return self._global.get(key[0], key[0])

    def _log(self, rank: int) -> _RankLog:
        if rank not in self._logs:
            self._logs[rank] = _RankLog(self.run_dir / rank_log(rank))
        return self._logs[rank]
