"""accel.runs views: metrics, sparklines, config diff, rank fates, the run view and the plot."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from accel import runs
from accel.errors import AccelError, UsageError
from accel.runs import plot as plotting
from accel.runs.metrics import direction, metric_views, parse_metrics, parse_point, sparkline
from accel.runs.view import build_view, config_diff, load_view, rank_views
from accel.telemetry import RankStats, ResourceSummary, Sample, summarize
from accel.workspace import Workspace
from run_helpers import write_run

LINES = [
    '{"step": 0, "time": 100.0, "rank": 0, "loss": 2.0, "lr": 0.1, "acc": 0.1, "note": "x"}',
    '{"step": 0, "time": 100.0, "rank": 1, "loss": 2.5}',
    '{"step": 1, "time": 101.0, "rank": 0, "loss": 1.0, "lr": 0.05, "acc": 0.7}',
    '{"step": 2, "time": 102.0, "rank": 0, "loss": NaN, "lr": 0.01, "acc": 0.6}',
    '{"step": 3, "time": 103.0, "rank": 0, "loss": 1.5}',
    "torn {",
]


def test_sparkline_scales_buckets_and_leaves_gaps_for_nan() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▁▁▁"
    assert sparkline([0, math.nan, 1]) == "▁ █"
    ramp = sparkline(list(range(100)), width=10)
    assert len(ramp) == 10 and ramp[0] == "▁" and ramp[-1] == "█" and list(ramp) == sorted(ramp)
    assert sparkline([]) == "" and sparkline([math.nan]) == " "


# Lines at the edges of JSON: a line is a point exactly when ``json.loads`` reads it as
# an object (the reader skips ``json.loads``'s wrappers for speed, not its refusals).
EDGE_LINES = [
    '{"step": 1, "loss": 1}',
    ' \t{"step": 1, "loss": 1} \r\n',
    '\ufeff{"step": 1, "loss": 1}',
    '{"step": 1, "loss": 1} x',
    '{"step": 1, "loss": 1}{"step": 2}',
    '{"step": 1, "loss": 1}\x0b',
    '{"step": 1, "loss": 1}\xa0',
    '[{"step": 1}]',
    '"text"',
    "",
    "   ",
    '{"step": 1, "loss": 1',
    '{"step": 1, "loss": 1e400, "n": -Infinity, "m": NaN}',
    '{"step": 1, "big": 1' + "0" * 400 + "}",
    '{"step": true, "rank": false, "time": true, "loss": true, "acc": 0.5}',
    '{"step": 1.0, "rank": "1", "time": "now", "loss": null, "x": [1], "y": {"z": 1}}',
    '{"step": 1, "step": 2, "rank": 3, "rank": 1, "loss": 1, "loss": 2}',
    '{"a": ' * 100_000 + "1" + "}" * 100_000,
]


@pytest.mark.parametrize("line", EDGE_LINES, ids=range(len(EDGE_LINES)))
def test_a_line_is_a_point_exactly_when_json_reads_an_object(line: str) -> None:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        data = None
    point = parse_point(line)
    if not isinstance(data, dict):
        assert point is None
        return
    reserved = ("step", "time", "rank")
    numbers = {k: v for k, v in data.items() if k not in reserved and type(v) in (int, float)}
    if any(abs(v) > 1e308 for v in numbers.values() if type(v) is int):
        assert point is None  # a number no float holds: not a metric line
        return
    assert point is not None
    assert point.values == pytest.approx({k: float(v) for k, v in numbers.items()}, nan_ok=True)
    step, stamp, rank = (data.get(k) for k in reserved)
    assert point.step == (step if type(step) is int else None)
    assert point.time == (float(stamp) if type(stamp) in (int, float) else None)
    assert point.rank == (rank if type(rank) is int else 0)


def test_direction_guesses_from_the_name() -> None:
    assert direction("train/loss") == "min" and direction("val_perplexity") == "min"
    assert direction("val/acc") == "max" and direction("f1_macro") == "max"
    assert direction("lr") is None and direction("train/epoch") is None


def test_metric_views_use_the_main_rank_and_skip_nan_for_best() -> None:
    points = parse_metrics(LINES)
    assert len(points) == 5
    views = {v.name: v for v in metric_views(points)}
    assert list(views) == ["loss", "lr", "acc"]
    loss = views["loss"]
    assert (loss.count, loss.last, loss.last_step) == (4, 1.5, 3)
    assert (loss.best, loss.best_step, loss.direction) == (1.0, 1, "min")
    assert (views["acc"].best, views["acc"].best_step) == (0.7, 1)
    assert views["lr"].best is None and views["lr"].last == 0.01
    assert len(loss.sparkline()) == 4 and loss.sparkline()[2] == " "


def test_config_diff_names_changed_added_and_removed_keys() -> None:
    run = {"version": 1, "launch": {"num_processes": 2, "env": {"A": "1"}, "old": 1}}
    now = {"version": 1, "launch": {"num_processes": 4, "env": {"A": "1"}, "new": 2}}
    diff = [(c.key, c.run, c.current) for c in config_diff(run, now)]
    assert diff == [("launch.num_processes", 2, 4), ("launch.old", 1, "(unset)")]


def _record(tmp_path: Path, **raw: object) -> runs.RunRecord:
    data = {"id": "r1", "world_size": 3, **raw}
    return runs.RunRecord.from_json("r1", tmp_path, data, live=False)


def test_rank_views_show_the_fates_the_launcher_recorded(tmp_path: Path) -> None:
    failures = [
        {
            "rank": 0,
            "exitcode": -15,
            "type": "RuntimeError",
            "message": "reset",
            "fate": "also failed",
        },
        {"rank": 1, "exitcode": -9, "fate": "failed"},
        {"rank": 2, "exitcode": -15, "fate": "stopped", "stopped": "after rank 1 failed"},
    ]
    attempts = [
        {"attempt": 0, "failures": [{"rank": 2, "exitcode": 3, "fate": "failed"}]},
        {"attempt": 1, "failures": failures},
    ]
    record = _record(tmp_path, status="failed", failed_rank=1, world_size=4, attempts=attempts)
    views = {v.rank: v for v in rank_views(record)}
    assert (views[1].status, views[1].exit_code) == ("failed", -9)
    assert "SIGKILL" in str(views[1].detail)
    assert views[0].status == "also failed" and views[0].detail == "RuntimeError: reset"
    assert views[2].status == "stopped"
    assert views[2].detail == "stopped by accel (SIGTERM) after rank 1 failed"
    assert (views[3].status, views[3].exit_code) == ("exited", 0)
    view = build_view(record, None, [], summarize([]))
    assert view.error_summary is not None
    assert view.error_summary.startswith("rank 1 failed first: killed (SIGKILL)")
    assert view.restarts == ((0, "rank 2 failed first: exited with code 3"),)


def test_rank_views_of_records_older_than_fates(tmp_path: Path) -> None:
    failures = [
        {"rank": 1, "exitcode": 1, "type": "ValueError", "message": "bad batch"},
        {"rank": 0, "exitcode": -15, "collateral": True},
    ]
    record = _record(
        tmp_path, status="failed", failed_rank=1, attempts=[{"attempt": 0, "failures": failures}]
    )
    views = {v.rank: v for v in rank_views(record)}
    assert views[1].status == "failed" and views[1].detail == "ValueError: bad batch"
    assert views[0].status == "stopped" and views[0].exit_code == -15
    assert views[2].status == "stopped" and views[2].exit_code is None
    plain = {v.rank: v for v in rank_views(_record(tmp_path, status="failed", failed_rank=2))}
    assert [v.status for v in plain.values()] == ["stopped", "stopped", "failed"]
    ok = {v.rank: v for v in rank_views(_record(tmp_path, status="succeeded"))}
    assert [v.status for v in ok.values()] == ["succeeded"] * 3 and ok[0].exit_code == 0


def test_a_node_tells_only_of_its_own_ranks(tmp_path: Path) -> None:
    # node 1's record listed rank 0 (node 0's) as succeeded, and after its own SIGKILL
    # node 0's record listed rank 1 as "exited 0": guesses from the wrong record
    (tmp_path / "rank-1.log").write_text("mine\n")
    failures = [{"rank": 1, "exitcode": -15, "fate": "stopped", "stopped": "on SIGTERM"}]
    attempts = [{"attempt": 0, "failures": failures}]
    for status, raw in (("succeeded", {}), ("interrupted", {"attempts": attempts})):
        record = _record(tmp_path, status=status, world_size=2, nnodes=2, **raw)
        views = {v.rank: v for v in rank_views(record)}
        assert (views[0].status, views[0].exit_code) == ("on another node", None)
        assert views[1].status == ("succeeded" if status == "succeeded" else "stopped")


def _samples() -> list[Sample]:
    return [
        Sample(1000.0 + i * 10, {0: RankStats(10, 90.0 + i, 2**30 + i * 2**20, 8)})
        for i in range(6)
    ]


def _make_run(ws: Workspace, run_id: str, **raw: object) -> Path:
    record = {
        "restarts": 1,
        "config": {"version": 1, "launch": {"num_processes": 2}},
        "error": {"rank": 1, "type": "RuntimeError", "message": "CUDA out of memory"},
        "resources": summarize(_samples()).to_json(),
        **raw,
    }
    return write_run(ws, run_id, record, LINES, [s.to_json() for s in _samples()])


def test_load_view_gathers_summary_diff_ranks_resources_and_metrics(ws: Workspace) -> None:
    _make_run(ws, "20261129-100000-aaaaaa")
    view = load_view(ws.layout, "latest", lambda: ws.config.nested())
    assert view.record.status == "failed" and view.record.restarts == 1
    assert view.error_summary == "RuntimeError: CUDA out of memory"
    assert view.record.duration == 330.0
    diff = {c.key: (c.run, c.current) for c in view.config_diff or ()}
    assert diff["launch.num_processes"] == (2, 1)
    assert "launch.hang_action" not in diff  # not recorded by the run: not a difference
    assert view.resources.ranks[0]["cpu_percent"].peak == 95.0
    assert [m.name for m in view.metrics] == ["loss", "lr", "acc"]
    data = json.loads(json.dumps(view.to_json()))
    assert data["metrics"][0]["best"] == 1.0 and data["ranks"][0]["rank"] == 0


def test_build_view_without_a_current_config_skips_the_diff(tmp_path: Path) -> None:
    view = build_view(_record(tmp_path, status="succeeded"), None, [], ResourceSummary())
    assert view.config_diff is None and view.metrics == () and view.error_summary is None


@pytest.mark.slow
def test_plot_writes_a_png_with_the_series_of_every_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    points = parse_metrics(LINES)
    first = plotting.PlotRun("run-a", points, _samples())
    second = plotting.PlotRun("run-b", parse_metrics(LINES[2:4]), _samples()[:3])
    panels = plotting.metric_panels([first, second], ["loss", "acc"])
    panels += plotting.resource_panels([first, second])
    out = plotting.plot(panels, tmp_path / "plots" / "loss.png", title="compare")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width == 1000 and height > 1000
    drawn = {(s["panel"], s["label"]): s["points"] for s in plotting.read_png_series(out)}
    assert drawn[("loss", "run-a rank 0")] == 4 and drawn[("loss", "run-a rank 1")] == 1
    assert drawn[("loss", "run-b")] == 2 and drawn[("acc", "run-a")] == 3
    assert drawn[("CPU %", "run-a rank 0")] == 6 and drawn[("RSS (MiB)", "run-b rank 0")] == 3


def test_a_long_line_is_drawn_from_few_points_and_keeps_its_spikes() -> None:
    # A million-line run was a million point objects (1.2 GB) and a million-point line:
    # each line is drawn from at most MAX_DRAWN points, its highs and lows kept.
    n = 200_000
    lines = (
        json.dumps({"step": i, "rank": 0, "loss": 1000.0 if i == 123_457 else (i % 7) / 7})
        for i in range(n)
    )
    run = plotting.PlotRun("long", map(parse_point, lines))
    (panel,) = plotting.metric_panels([run], ["loss"])
    (line,) = panel.series
    assert line.logged == n and len(line.x) <= plotting.MAX_DRAWN
    assert max(line.y) == 1000.0 and line.x[line.y.index(1000.0)] == 123_457
    assert min(line.y) == 0.0 and list(line.x) == sorted(line.x)
    assert line.x[0] == 0 and line.x[-1] >= n - n // (plotting.MAX_DRAWN // 2)


@pytest.mark.slow
def test_plot_refuses_an_unknown_metric_and_explains_a_missing_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = plotting.PlotRun("r", parse_metrics(LINES))
    with pytest.raises(UsageError, match="no metric 'los'.*acc, loss, lr"):
        plotting.metric_panels([run], ["los"])
    with pytest.raises(UsageError, match="nothing to plot"):
        plotting.plot([], tmp_path / "x.png")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(AccelError, match=r"pip install 'accel-workspace\[plot\]'"):
        plotting.plot(plotting.metric_panels([run], ["loss"]), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_deeply_nested_lines_and_records_are_skipped_not_a_crash(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    from accel.cli.main import main

    deep = "[" * 100_000 + "]" * 100_000
    folder = _make_run(ws, "20261129-100000-aaaaaa", hangs=[{"message": "x"}])
    with open(folder / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 9, "rank": 0, "loss": ' + deep + "}\n")
        fh.write(deep + "\n")
    with open(folder / "resources.jsonl", "a") as fh:
        fh.write(deep + "\n")
    other = runs.run_dir(ws.layout, "20261129-090000-bbbbbb")
    other.mkdir(parents=True)
    # json reads this one (under its limit); redacting it must not recurse past Python's
    (other / "run.json").write_text('{"id": "x", "cwd": ' + "[" * 950 + "]" * 950 + "}")
    assert main(["runs", "show", "aaaaaa", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in shown["metrics"]] == ["loss", "lr", "acc"]
    for argv in (["runs", "show", "bbbbbb"], ["runs"], ["runs", "--json"]):
        assert main(argv) == 0, argv
        assert "unexpected" not in capsys.readouterr().err


def test_a_spare_nodes_run_says_no_worker_ran_there(
    ws: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    # A spare node's run ends "succeeded" with no attempt and no log: it said nothing of
    # why ("has no rank logs"). The launcher notes "spare": true.
    from accel.cli.main import main

    spare = {"status": "succeeded", "exit_code": 0, "failed_rank": None, "attempts": []}
    write_run(ws, "20261129-100000-aaa111", {**spare, "spare": True})
    write_run(ws, "20261129-100000-bbb222", {**spare, "spare": "yes"})  # by hand: not it
    capsys.readouterr()
    assert main(["runs", "show", "aaa111"]) == 0
    said = "  spare     the job ended before this spare node was needed; no worker ran here"
    assert said in capsys.readouterr().out.splitlines()
    assert main(["runs", "show", "aaa111", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spare"] is True
    assert main(["logs", "aaa111"]) == 0
    assert "it waited as a spare node and no worker ran here" in capsys.readouterr().err
    assert main(["runs", "show", "bbb222", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spare"] is False
