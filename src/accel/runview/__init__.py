"""Views of a run for ``accel runs show`` and ``accel runs plot``: pure data from the
run folder (``run.json``, ``metrics.jsonl``, ``resources.jsonl``). Formatting lives in
the CLI; nothing here imports torch (and matplotlib only when plotting)."""

from __future__ import annotations

from accel.runview._metrics import (
    METRICS_FILE,
    MetricPoint,
    MetricView,
    direction,
    metric_names,
    metric_views,
    parse_metrics,
    read_metrics,
    series,
    sparkline,
)
from accel.runview.show import (
    ConfigChange,
    RankView,
    RunView,
    build_view,
    config_diff,
    load_view,
    rank_views,
    run_resources,
)

__all__ = [
    "METRICS_FILE",
    "ConfigChange",
    "MetricPoint",
    "MetricView",
    "RankView",
    "RunView",
    "build_view",
    "config_diff",
    "direction",
    "load_view",
    "metric_names",
    "metric_views",
    "parse_metrics",
    "rank_views",
    "read_metrics",
    "run_resources",
    "series",
    "sparkline",
]
