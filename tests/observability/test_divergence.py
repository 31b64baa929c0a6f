"""Divergence: a metric that becomes NaN or infinite is flagged (or stops the run)."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

from accel.launch.divergence import MetricsTail, NonFinite, first_nonfinite
from accel.runs.metrics import parse_metrics


def test_first_nonfinite_reports_each_metric_once() -> None:
    points = parse_metrics(
        [
            '{"step": 1, "rank": 0, "loss": 1.0, "acc": 0.5}',
            '{"step": 2, "rank": 1, "loss": NaN, "acc": Infinity}',
            '{"step": 3, "rank": 0, "loss": NaN, "acc": -Infinity}',
        ]
    )
    seen: set[str] = set()
    found = first_nonfinite(points, seen)
    assert [(f.metric, f.rank, f.step, f.value) for f in found] == [
        ("loss", 1, 2, "nan"),
        ("acc", 1, 2, "inf"),
    ]
    assert first_nonfinite(points, seen) == [] and seen == {"loss", "acc"}
    assert found[0].message == "metric 'loss' became NaN at step 2 on rank 1"
    assert (
        NonFinite("x", 0, None, "-inf").message
        == "metric 'x' became -inf at an unknown step on rank 0"
    )


def test_metrics_tail_reads_only_new_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []  # no file yet
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    assert [p.step for p in tail.read()] == [1]
    with open(path, "a") as fh:
        fh.write('ss": NaN}\n')
    (point,) = tail.read()
    assert point.step == 2 and math.isnan(point.values["loss"])
    assert tail.read() == []


def test_metrics_tail_holds_no_burst_or_endless_line_whole(tmp_path: Path) -> None:
    # A line that never ends (64 MiB of it here) is read a chunk at a time and skipped,
    # as runs show skips it; the lines after it count.
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    with open(path, "wb") as fh:
        fh.write(b'{"step": 1, "loss": 1.0}\n')
        fh.write(b'{"step": 2, "note": "' + b"x" * (64 << 20))
    tracemalloc.start()
    try:
        assert [p.step for p in tail.read()] == [1]
        with open(path, "ab") as fh:
            fh.write(b'"}\n{"step": 3, "loss": NaN}\n')
        (point,) = tail.read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert point.step == 3 and math.isnan(point.values["loss"])
    assert peak < 16 << 20, peak


def test_metrics_tail_joins_a_line_cut_between_looks_and_chunks(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    lines = [
        f'{{"step": {i}, "loss": {i}.5, "pad": "{"p" * (i * 997 % 5000)}"}}\n' for i in range(3000)
    ]
    text = "".join(lines).encode()
    seen: list[int | None] = []
    for cut in range(0, len(text), 777_777):  # looks that end in the middle of lines
        with open(path, "ab") as fh:
            fh.write(text[cut : cut + 777_777])
        seen += [p.step for p in tail.read()]
    assert seen == list(range(3000))
