"""`accel logs --tail N`: the last N lines of each rank log, as `tail -n` counts them,
found by reading back from the log's end: a long log costs what the lines shown cost,
then (with `--follow`) what the run writes."""

from __future__ import annotations

import os
import random
import re
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accel import runs
from accel.cli._worker_console import WorkerConsole
from accel.cli.main import main
from accel.runs import follow as following
from accel.workspace import Workspace
from run_helpers import write_run

RUN_ID = "20261129-100000-aaaaaa"
MiB = 1 << 20
GiB = 1 << 30


class Sink:
    """A console's file: what it was given, and what it had been asked to show (flushed)."""

    def __init__(self) -> None:
        self.text, self.shown = "", ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        self.shown = self.text

    def isatty(self) -> bool:
        return False


def run_folder(ws: Workspace) -> Path:
    return write_run(ws, RUN_ID, {"status": "succeeded", "exit_code": 0, "world_size": 2})


def tail_n(data: bytes, n: int) -> bytes:
    """What `tail -n N` prints of ``data``: a last line without ``\\n`` is a line."""
    lines = re.findall(rb"[^\n]*\n|[^\n]+$", data)
    return b"".join(lines[-n:]) if n else b""


_PIECES = [b"a", b"line", b"", b"\r", b"50%\r", b"\xc3\xa9", b"[stderr] x", b"\n", b"\n", b"\n"]


@pytest.mark.parametrize("seed", range(8))
def test_the_tail_starts_where_tail_n_starts(tmp_path: Path, seed: int) -> None:
    from accel._fs import tail_offset

    rnd = random.Random(seed)
    data = b"".join(rnd.choice(_PIECES) for _ in range(rnd.randrange(0, 120)))
    path = tmp_path / "rank-0.log"
    path.write_bytes(data)
    for n in range(data.count(b"\n") + 3):
        for chunk in (1, 2, 5, 64, 1 << 20):
            assert data[tail_offset(path, n, chunk=chunk) :] == tail_n(data, n), (n, chunk)


def _counting(real: Callable[..., bytes], count: list[int]) -> Callable[..., bytes]:
    def read(*args: Any) -> bytes:
        data = real(*args)
        count[0] += len(data)
        return data

    return read


def test_the_tail_of_a_huge_log_reads_only_its_end(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = run_folder(ws) / "rank-0.log"
    with open(path, "wb") as fh:
        fh.truncate(2 * GiB)  # sparse: two gigabytes of one line of zeros
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n" + b"".join(f"line {i}\n".encode() for i in range(40)))
    record = runs.read_run(ws.layout, RUN_ID)
    out, err = Sink(), Sink()
    console = WorkerConsole(2, stdout=out, stderr=err)  # type: ignore[arg-type]
    read = [0]
    tracemalloc.start()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(os, "read", _counting(os.read, read))
            patch.setattr(os, "pread", _counting(os.pread, read))
            for rank, stream, piece in following.follow(ws.layout, record, set(), tail=20):
                console(rank, stream, piece)
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    console.end_line()
    assert out.text == "".join(f"[rank0] line {i}\n" for i in range(20, 40)) and not err.text
    assert read[0] < 2 * MiB, f"read {read[0] / MiB:.0f} MiB of a 2 GiB log for 20 lines"
    assert held < 4 * MiB, f"held {held / MiB:.1f} MiB"


def test_tail_shows_the_last_lines_of_each_rank(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = run_folder(ws)
    (folder / "rank-0.log").write_bytes(
        b"zero 1\nzero 2\n[stderr] oops\n 10%\r 50%\r100%\nzero partial"
    )
    (folder / "rank-1.log").write_bytes(b"one 1\none 2\none 3\n")
    capsys.readouterr()
    assert main(["logs", "--tail", "3"]) == 0
    assert capsys.readouterr() == (
        "[rank0] 100%\n[rank0] zero partial\n[rank1] one 1\n[rank1] one 2\n[rank1] one 3\n",
        "[rank0] oops\n",
    )
    assert main(["logs", "-n", "1", "--rank", "1", "--no-prefix"]) == 0
    assert capsys.readouterr() == ("one 3\n", "")
    assert main(["logs", "--tail", "0"]) == 0
    assert capsys.readouterr() == ("", "")
    assert main(["logs", "-n", "99", "-r", "1"]) == 0  # more than there are: all of them
    assert capsys.readouterr().out == "[rank1] one 1\n[rank1] one 2\n[rank1] one 3\n"


def test_tail_and_since_show_the_later_start(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """--since 00:16:48 starts at line 8; --tail 5 at line 5: the later one wins (the
    last N lines of what was written since then), whichever of the two it is."""
    folder = run_folder(ws)
    (folder / "rank-0.log").write_bytes(b"".join(f"l{i}\n".encode() for i in range(10)))
    (folder / "rank-0.log.idx").write_text("".join(f"{3 * i} {1000 + i}.0\n" for i in range(10)))
    since = "1970-01-01T00:16:48+00:00"  # 1008: the time of line 8
    capsys.readouterr()
    assert main(["logs", "--since", since, "--tail", "5", "--no-prefix"]) == 0
    assert capsys.readouterr().out == "l8\nl9\n"
    assert main(["logs", "--since", "1970-01-01T00:16:42+00:00", "-n", "3", "--no-prefix"]) == 0
    assert capsys.readouterr().out == "l7\nl8\nl9\n"


@pytest.mark.parametrize("bad", ["-1", "x", "1.5", ""])
def test_a_bad_tail_is_one_line_and_exit_2(
    ws: Workspace, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    (run_folder(ws) / "rank-0.log").write_text("hello\n")
    capsys.readouterr()
    assert main(["logs", "--tail", bad]) == 2
    out, err = capsys.readouterr()
    assert not out, out
    (line,) = err.strip().splitlines()
    assert line == f"error: invalid --tail {bad!r}: expected a whole number >= 0", line


def test_tail_then_follow_shows_each_read_before_it_waits(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `tail -n 2 -f`: the last 2 lines, then what the run writes; at each wait for
    more, everything read so far is shown (a partial line too), nothing held back."""
    log = run_folder(ws) / "rank-0.log"
    log.write_bytes(b"old 1\nold 2\nold 3\nlast partial")
    writes: Iterator[bytes] = iter([b" done\nnew 1\n", b"new 2 partial"])
    seen: list[str] = []
    out = Sink()

    def wait(_seconds: float) -> None:
        seen.append(out.shown)
        with open(log, "ab") as fh:
            fh.write(next(writes))

    states = iter([True, True, False])
    monkeypatch.setattr(following, "is_live", lambda _layout, _run: next(states))
    monkeypatch.setattr(following.time, "sleep", wait)
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["logs", "-f", "-n", "2"]) == 0
    assert seen == [
        "[rank0] old 3\n[rank0] last partial",
        "[rank0] old 3\n[rank0] last partial done\n[rank0] new 1\n",
    ]
    assert out.shown == out.text == seen[-1] + "[rank0] new 2 partial\n"
    assert f"run {RUN_ID} succeeded, exit code 0" in capsys.readouterr().err
