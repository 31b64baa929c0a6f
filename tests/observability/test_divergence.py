"""Divergence: a metric that becomes NaN or infinite is flagged (or stops the run)."""

from __future__ import annotations

import math
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
