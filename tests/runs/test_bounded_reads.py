"""`accel logs` and `accel runs show` read a run's files as streams: memory stays within
a few MiB whatever a rank log, metrics.jsonl, resources.jsonl or a log index holds (a
long run's gigabytes, a sparse file, one line without end), and the output is what one
read of the whole file gave."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from log_tokens import LOG_TOKENS

from accel import runs
from accel.cli._worker_console import WorkerConsole
from accel.runs import follow as following
from accel.runs import logindex
from accel.runs import metrics as metrics_mod
from accel.runs.follow import LogReader
from accel.runs.metrics import MetricPoint, _buckets, metric_views, parse_metrics, sparkline
from accel.runs.streams import NL, Piece
from accel.runs.view import load_view, run_resources
from accel.telemetry import read_samples, summarize
from accel.workspace import Workspace
from run_helpers import accel_command, write_run

RUN_ID = "20261129-100000-aaaaaa"
MiB = 1 << 20
BOUND = 8 * MiB  # what reading any of these files may hold at once


def peak(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()`` and the most memory Python held meanwhile."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class Sink:
    """A console's file: counts what it is given, keeps its first and last characters."""

    def __init__(self, tty: bool = False) -> None:
        self.size, self.head, self.tail, self.tty = 0, "", "", tty

    def write(self, text: str) -> int:
        self.size += len(text)
        if len(self.head) < 200:
            self.head += text[: 200 - len(self.head)]
        self.tail = (self.tail + text[-200:])[-200:]
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


def run_folder(ws: Workspace) -> Path:
    return write_run(ws, RUN_ID, {"status": "succeeded", "exit_code": 0, "world_size": 1})


def render(ws: Workspace, **options: Any) -> tuple[Sink, Sink]:
    """What `accel logs` prints of the run (stdout, stderr), piped, as it prints it."""
    out, err = Sink(), Sink()
    console = WorkerConsole(1, stdout=out, stderr=err)  # type: ignore[arg-type]
    record = runs.read_run(ws.layout, RUN_ID)
    for rank, stream, piece in following.follow(ws.layout, record, set(), **options):
        console(rank, stream, piece)
    console.end_line()
    return out, err


# -- accel logs ---------------------------------------------------------------------------


def test_a_large_rank_log_is_shown_in_bounded_memory(ws: Workspace) -> None:
    line = b"step 1 loss=0.5 " + b"x" * 2032 + b"\n"  # 2 KiB
    stderr = b"[stderr] warning: " + b"y" * 2030 + b"\n"
    with open(run_folder(ws) / "rank-0.log", "wb") as fh:
        fh.write((line * 63 + stderr) * 384)  # 48 MiB
    (out, err), held = peak(lambda: render(ws))
    assert out.size == 63 * 384 * (len(line) + len("[rank0] "))
    assert err.size == 384 * (len(stderr) - len("[stderr] ") + len("[rank0] "))
    assert out.head.startswith("[rank0] step 1 loss=0.5 xxx") and err.tail.endswith("yyy\n")
    assert held < BOUND, f"held {held / MiB:.1f} MiB to show a 48 MiB log"


def test_a_line_without_end_goes_out_in_pieces(ws: Workspace) -> None:
    with open(run_folder(ws) / "rank-0.log", "wb") as fh:
        fh.write(b"first\n" + "é".encode() * (20 * MiB))  # 40 MiB, no newline
    (out, err), held = peak(lambda: render(ws))
    assert out.size == len("[rank0] first\n[rank0] ") + 20 * MiB + 1
    assert "\ufffd" not in out.head + out.tail  # no character cut between two pieces
    assert out.tail.endswith("éé\n") and err.size == 0
    assert held < BOUND, f"held {held / MiB:.1f} MiB for a 40 MiB line"


def test_grep_matches_and_shows_the_start_of_a_line_too_long_to_hold(ws: Workspace) -> None:
    with open(run_folder(ws) / "rank-0.log", "wb") as fh:
        fh.write(b"needle " + b"x" * (24 * MiB) + b"\nneedle short\nhay\n")
    keep = logindex.line_filter("needle")
    (out, _), held = peak(lambda: render(ws, keep=keep))
    shown = len("[rank0] needle ") + following.MAX_LINE - len("needle ")
    more = 24 * MiB + len("needle ") - following.MAX_LINE
    assert out.tail.endswith(
        f"x [accel: {more} more bytes of this line]\n[rank0] needle short\n"
    ), out.tail
    assert out.size == shown + len(f" [accel: {more} more bytes of this line]\n") + 21
    assert held < BOUND


def test_a_terminal_holds_at_most_the_start_of_a_line() -> None:
    term = Sink(tty=True)
    console = WorkerConsole(1, stdout=term, stderr=Sink(tty=True))  # type: ignore[arg-type]
    piece = b"z" * MiB

    def draw() -> None:
        console(0, "stdout", Piece(piece, b"", True, False))
        for _ in range(47):
            console(0, "stdout", Piece(piece, b"", False, False))
        console(0, "stdout", Piece(b"end", NL, False, False))

    _, held = peak(draw)
    more = 48 * MiB + 3 - MiB  # a terminal shows a line's first MiB
    assert term.tail.endswith(f"zz [accel: {more} more bytes of this line]\n"), term.tail
    assert held < BOUND, f"held {held / MiB:.1f} MiB for a 48 MiB line"


_TOKENS = LOG_TOKENS


@pytest.mark.parametrize("seed", range(6))
def test_reading_in_chunks_shows_what_one_read_of_it_all_shows(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rnd = random.Random(seed)
    log = b"".join(rnd.choice(_TOKENS) for _ in range(300))
    (run_folder(ws) / "rank-0.log").write_bytes(log)
    keep = logindex.line_filter("[0-9]")
    whole = [render(ws), render(ws, keep=keep)]
    for chunk, carry in [(1, 64), (3, 64), (7, 100), (16, 64), (64, 512)]:
        monkeypatch.setattr(following, "CHUNK", chunk)
        monkeypatch.setattr(following, "CARRY", carry)
        parts = [render(ws), render(ws, keep=keep)]
        assert [(s.size, s.head, s.tail) for pair in parts for s in pair] == [
            (s.size, s.head, s.tail) for pair in whole for s in pair
        ], (chunk, carry)


def test_reading_in_chunks_follows_what_a_log_gains(ws: Workspace) -> None:
    path = run_folder(ws) / "rank-0.log"
    path.write_bytes(b"one\n 10%\r")
    reader = LogReader({0: path})
    assert [p.data for _, _, p in reader.read()] == [b"one", b" 10%"]  # the bar shows
    with open(path, "ab") as fh:
        fh.write(b" 20%\r 30%\rtwo\n")
    assert [p.data for _, _, p in reader.read(final=True)] == [b"two"]


@pytest.mark.parametrize("how", ["link", "sparse", "bad utf-8"])
def test_a_strange_rank_log_is_shown_or_skipped_never_held(
    ws: Workspace, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    from accel.cli.main import main

    folder = run_folder(ws)
    (folder / "rank-1.log").write_text("hello from rank 1\n")
    path = folder / "rank-0.log"
    if how == "link":
        path.symlink_to("/dev/zero")
    elif how == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(64 * MiB)
    else:
        path.write_bytes(b"ok \xff\xfe \xe2\x82\n[stderr] \xc3(\n")
    code, held = peak(lambda: main(["logs"]))
    out, err = capsys.readouterr()
    assert code == 0 and "unexpected" not in err, err
    assert "[rank1] hello from rank 1\n" in out
    if how == "bad utf-8":
        assert "[rank0] ok \ufffd\ufffd \ufffd\n" in out and "[rank0] \ufffd(\n" in err
    assert held < BOUND


# -- accel logs --since: the index ----------------------------------------------------------


def _index(path: Path, times: list[float], hole: int = 0) -> list[tuple[int, float]]:
    entries = [(i * 100, t) for i, t in enumerate(times)]
    lines = [f"{o} {t:.3f}\n".encode() for o, t in entries]
    with open(path, "wb") as fh:
        half = len(lines) // 2
        fh.write(b"".join(lines[:half]) + b"\0" * hole + b"\n" + b"".join(lines[half:]))
    return [(o, float(f"{t:.3f}")) for o, t in entries]


def test_since_searches_a_large_index_without_reading_it(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"x" * 100)
    entries = _index(logindex.index_path(log), [1000.0 + i * 1.5 for i in range(400_000)])
    size = log.stat().st_size
    for cutoff in (0.0, 1000.0, 1000.1, 1234.5, 300_000.0, 1000.0 + 399_999 * 1.5, 1e12):
        found, held = peak(lambda cutoff=cutoff: logindex.start_offset(log, cutoff))
        assert found == logindex.offset_since(entries, cutoff, size), cutoff
        assert held < MiB, f"held {held / MiB:.1f} MiB of a 7 MiB index"


def test_since_reads_past_damage_in_the_index(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"x" * 100)
    entries = _index(logindex.index_path(log), [float(i) for i in range(60_000)], hole=3 * MiB)
    for cutoff in (10.0, 29_999.5, 30_000.0, 45_000.0, 1e9):
        found = logindex.start_offset(log, cutoff)
        assert found == logindex.offset_since(entries, cutoff, 100), cutoff


def test_a_sparse_index_is_no_index(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"x" * 100)
    os.utime(log, (1000, 1000))
    with open(logindex.index_path(log), "wb") as fh:
        fh.truncate(64 * MiB)
    found, held = peak(
        lambda: (logindex.start_offset(log, 999.0), logindex.start_offset(log, 1001.0))
    )
    assert found == (0, 100) and held < 4 * MiB  # as without an index: by the log's mtime


# -- accel runs show: metrics and resources -------------------------------------------------


def _metrics_line(step: int, pad: int = 0) -> str:
    row = {"step": step, "time": 100.0 + step, "rank": 0, "loss": 1 / (step + 1)}
    row["acc"] = step / 10_000
    if pad:
        row["note"] = "n" * pad
    return json.dumps(row)


def test_runs_show_summarises_a_large_metrics_file_in_bounded_memory(ws: Workspace) -> None:
    lines = [_metrics_line(s, pad=8000) for s in range(6000)]  # 48 MiB
    write_run(ws, RUN_ID, {"status": "succeeded"}, lines)
    view, held = peak(lambda: load_view(ws.layout, RUN_ID, lambda: {}))
    loss, acc = view.metrics
    assert (loss.name, loss.count, loss.last_step, loss.best_step) == ("loss", 6000, 5999, 5999)
    assert (acc.best, acc.direction) == (0.5999, "max")
    assert loss.sparkline() == sparkline([1 / (s + 1) for s in range(6000)])
    assert held < BOUND, f"held {held / MiB:.1f} MiB for a 48 MiB metrics.jsonl"


def test_runs_show_of_a_sparse_metrics_file(ws: Workspace) -> None:
    folder = write_run(ws, RUN_ID, {"status": "succeeded"})
    with open(folder / "metrics.jsonl", "wb") as fh:
        fh.truncate(96 * MiB)  # what a crash leaves, or a file made to hurt
        fh.seek(0, os.SEEK_END)
        fh.write(("\n" + _metrics_line(7) + "\n").encode())
    view, held = peak(lambda: load_view(ws.layout, RUN_ID, lambda: {}))
    assert [(m.name, m.count, m.last_step) for m in view.metrics] == [
        ("loss", 1, 7),
        ("acc", 1, 7),
    ]
    assert held < BOUND


def test_a_live_runs_resources_are_summarised_as_they_stream(ws: Workspace) -> None:
    def sample(i: int, pad: int) -> dict[str, Any]:
        stats = {"pid": 1, "cpu_percent": 50.0 + i % 7, "rss_bytes": 2**30 + i, "threads": 4}
        return {"time": 100.0 + i, "ranks": {"0": stats}, "gpus": [], "pad": "p" * pad}

    folder = write_run(
        ws, RUN_ID, {"status": "running"}, None, [sample(i, 8000) for i in range(6000)]
    )
    record = runs.read_run(ws.layout, RUN_ID)
    summary, held = peak(lambda: run_resources(record))
    small = folder / "small.jsonl"
    small.write_text("".join(json.dumps(sample(i, 0)) + "\n" for i in range(6000)))
    assert summary == summarize(read_samples(small))
    assert held < BOUND, f"held {held / MiB:.1f} MiB for a 48 MiB resources.jsonl"


def test_summaries_keep_the_nan_rules_of_min_and_max() -> None:
    from accel.telemetry import RankStats, Sample

    samples = [
        Sample(t, {0: RankStats(1, cpu, 10, 1)})
        for t, cpu in ((math.nan, math.nan), (5.0, 1.0), (3.0, 7.0))
    ]
    summary = summarize(iter(samples))
    assert summary.samples == 3 and math.isnan(summary.first or 0.0)
    assert math.isnan(summary.ranks[0]["cpu_percent"].peak)  # as max() of them: the first


def _points(values: Iterator[float]) -> Iterator[MetricPoint]:
    for step, value in enumerate(values):
        yield MetricPoint(step, None, 0, {"loss": value, "val/acc": -value})


def test_a_series_too_long_to_keep_keeps_its_numbers_and_its_trend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wave = [math.sin(i / 900) for i in range(20_000)]
    wave[7000:9000] = [math.nan] * 2000
    ramp = [i / 7 for i in range(30_000)]
    exact = metric_views(_points(iter(wave))) + metric_views(_points(iter(ramp)))
    monkeypatch.setattr(metrics_mod, "KEEP_VALUES", 0)  # no value kept as it is
    blocks = metric_views(_points(iter(wave))) + metric_views(_points(iter(ramp)))
    for got, want in zip(blocks, exact, strict=True):
        assert (got.count, got.last, got.last_step) == (want.count, want.last, want.last_step)
        assert (got.best, got.best_step) == (want.best, want.best_step)
        assert len(got.values) == metrics_mod.TREND_POINTS < len(want.values)
        have, truth = _buckets(got.values, 24), _buckets(want.values, 24)
        assert [b is None for b in have] == [b is None for b in truth]  # the NaN gap
        scale = max(abs(b) for b in truth if b is not None)
        assert all(abs(h - t) < 0.02 * scale for h, t in zip(have, truth, strict=True) if t)
        assert got.sparkline() == want.sparkline()
    assert blocks[2].sparkline() == "".join(sorted(blocks[2].sparkline()))  # the ramp


def test_the_main_rank_may_come_second() -> None:
    lines = [
        '{"step": 0, "rank": 1, "grad": 3.0, "loss": 9.0}',
        '{"step": 0, "rank": 0, "loss": 2.0}',
        '{"step": 1, "rank": 1, "loss": 8.0}',
        '{"step": 1, "rank": 0, "loss": 1.0, "grad": 0.5}',
    ]
    views = metric_views(parse_metrics(lines))
    assert [(v.name, v.count, v.last, v.values) for v in views] == [
        ("grad", 1, 0.5, (0.5,)),
        ("loss", 2, 1.0, (2.0, 1.0)),
    ]


def test_a_file_of_endless_metric_names_follows_the_first_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics_mod, "MAX_METRICS", 2)
    lines = ['{"rank": 0, "a": 1, "b": 2}', '{"rank": 0, "c": 3, "b": 4}']
    assert [(v.name, v.last) for v in metric_views(parse_metrics(lines))] == [("a", 1), ("b", 4)]


# -- the installed accel ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_installed_accel_reads_large_sparse_files_in_bounded_memory(ws: Workspace) -> None:
    folder = write_run(ws, RUN_ID, {"status": "succeeded", "world_size": 1})
    for name, tail in (("rank-0.log", b"\nlast words\n"), ("metrics.jsonl", b'\n{"loss": 2}\n')):
        with open(folder / name, "wb") as fh:
            fh.truncate(512 * MiB)
            fh.seek(0, os.SEEK_END)
            fh.write(tail)
    for args, shown in ((("logs",), "[rank0] last words"), (("runs", "show"), "loss")):
        # a child's peak RSS counts the memory of the process that forked it: accel is
        # started by a small Python, not by this test's (larger) process
        done = subprocess.run(
            [sys.executable, "-c", _PEAK, *accel_command(), *args],
            capture_output=True,
            text=True,
            timeout=100,
        )
        assert done.returncode == 0 and shown in done.stdout, done.stderr
        peak_kib = int(done.stderr.splitlines()[-1])
        assert peak_kib < 100 * 1024, f"accel {' '.join(args)}: {peak_kib} KiB"  # Linux: KiB


_PEAK = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], timeout=90).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""
