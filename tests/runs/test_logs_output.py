"""`accel logs` of a finished log prints it a chunk at a time: whole lines of one stream
go out as one piece, and the console writes what it holds per chunk, not per line, in
the order written. What it prints is what the per-line path printed, byte for byte,
piped and on a terminal."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from log_tokens import LOG_TOKENS

from accel.cli import _worker_console
from accel.cli._worker_console import WorkerConsole
from accel.cli.main import main
from accel.runs import follow as following
from accel.runs.streams import NL, STDERR, STDOUT, Piece, RankLogReader
from accel.workspace import Workspace
from run_helpers import write_run

RUN_ID = "20261129-100000-aaaaaa"
MiB = 1 << 20


class Sink:
    """A console's file: every write and flush, in order (a terminal's when ``tty``)."""

    def __init__(self, tty: bool = False, order: list[Sink] | None = None) -> None:
        self.parts: list[str] = []
        self.size = self.flushes = 0
        self.tty = tty
        self.order = order if order is not None else []  # the sinks written, in turn

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def write(self, text: str) -> int:
        self.parts.append(text)
        self.size += len(text)
        self.order.append(self)
        return len(text)

    def flush(self) -> None:
        self.flushes += 1

    def isatty(self) -> bool:
        return self.tty


def run_folder(ws: Workspace) -> Path:
    return write_run(ws, RUN_ID, {"status": "succeeded", "exit_code": 0, "world_size": 2})


def logs(monkeypatch: pytest.MonkeyPatch, out: Sink, err: Sink, *args: str) -> None:
    """``accel logs ARGS`` with ``out`` and ``err`` as its stdout and stderr."""
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", err)
        assert main(["logs", *args]) == 0


def test_a_long_log_reaches_a_pipe_a_chunk_at_a_time(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [f"step {i:7d}  loss 0.{i % 99991:05d}" for i in range(200_000)]  # 8 MB out
    body = "".join(line + "\n" for line in lines)
    (run_folder(ws) / "rank-0.log").write_text(body + "[stderr] done\n")
    out, err = Sink(), Sink()
    logs(monkeypatch, out, err)
    assert out.text == "".join(f"[rank0] {line}\n" for line in lines)
    assert err.text == "[rank0] done\n"
    assert len(out.parts) <= 64 and out.flushes <= 64, (len(out.parts), out.flushes)


def test_a_long_log_reaches_a_terminal_a_chunk_at_a_time(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [f"step {i:7d}" for i in range(100_000)]
    (run_folder(ws) / "rank-0.log").write_text("".join(line + "\n" for line in lines))
    term = Sink(tty=True)
    monkeypatch.setenv("NO_COLOR", "1")
    logs(monkeypatch, term, term, "--no-prefix")
    assert term.text == "".join(line + "\n" for line in lines)
    assert len(term.parts) <= 64 and term.flushes <= 64, (len(term.parts), term.flushes)


_TOKENS = [
    *LOG_TOKENS[:-1],
    b"\x1b[31mred\x1b[0m and \x1b[2J cleared\n",
    b"[stderr] w1\n[stderr] w2\nout [stderr] \n",
    LOG_TOKENS[-1],
]


def _reference(log: bytes, out: Sink, err: Sink) -> None:
    """What the per-line path prints of ``log``: one line a piece, written at once."""
    console = WorkerConsole(1, stdout=out, stderr=err)  # type: ignore[arg-type]
    for stream, piece in RankLogReader().feed(log, final=True):
        console(0, stream, piece)
    console.end_line()


@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
@pytest.mark.parametrize("seed", range(4))
def test_what_is_printed_is_what_the_line_by_line_path_prints(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, seed: int, tty: bool
) -> None:
    rnd = random.Random(seed)
    log = b"".join(rnd.choice(_TOKENS) for _ in range(3000))
    if seed == 3:  # whole lines longer than a terminal shows, in one large block
        long = b"L" * (MiB + MiB // 2)
        log = log[:5000] + b"\n" + long + b"\nshort\n" + long + b"\n" + log[5000:]
        monkeypatch.setattr(following, "CHUNK", 8 * MiB)
        monkeypatch.setattr(following, "CARRY", 8 * MiB)
    (run_folder(ws) / "rank-0.log").write_bytes(log)
    monkeypatch.setenv("NO_COLOR", "1")
    order: list[Sink] = []
    want_out = Sink(tty, order)
    want_err = want_out if tty else Sink(tty, order)
    _reference(log, want_out, want_err)
    out = Sink(tty, [])
    err = out if tty else Sink(tty, out.order)
    logs(monkeypatch, out, err)
    assert out.text == want_out.text and err.text == want_err.text
    # a write per run of one stream (and per chunk held), not per line
    runs = sum(1 for i, sink in enumerate(order) if not i or order[i - 1] is not sink)
    size = out.size + (err.size if err is not out else 0)
    assert len(out.order) <= runs + size // (1 << 16) + 2 < len(order) // 2
    if seed == 3 and tty:
        assert out.text.count(f" [accel: {MiB // 2} more bytes of this line]\n") == 2


def test_a_holding_console_keeps_the_order_and_little_else() -> None:
    """Both streams on one terminal: what is held comes out in the order written, and
    never more than HOLD_LIMIT characters (and one piece) are held."""
    prompt, held = Sink(tty=True), Sink(tty=True)
    one = WorkerConsole(2, stdout=prompt, stderr=prompt)  # type: ignore[arg-type]
    other = WorkerConsole(2, stdout=held, stderr=held, hold=True)  # type: ignore[arg-type]
    rnd = random.Random(7)
    given = 0
    for i in range(4000):
        stream = rnd.choice((STDOUT, STDERR))
        piece = Piece(b"x" * rnd.randrange(0, 600) + f" {i}".encode(), NL, True, False)
        one(i % 2, stream, piece)
        other(i % 2, stream, piece)
        given += len(piece.data)
        assert prompt.size - held.size <= _worker_console.HOLD_LIMIT + 700
    assert len(held.parts) < len(prompt.parts) // 20
    other.flush()
    assert held.text == prompt.text and given < len(held.text)
