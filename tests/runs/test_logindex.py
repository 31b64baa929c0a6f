"""accel.runs.logindex: the rank-log time index, --since and --grep."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from accel.errors import UsageError
from accel.runs import logindex as logs


def test_index_writer_notes_at_most_once_per_interval(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    writer = logs.LogIndexWriter(log)
    for offset, now in [(0, 100.0), (10, 100.5), (20, 101.0), (35, 105.2)]:
        writer.note(offset, now)
    assert logs.read_index(logs.index_path(log)) == [(0, 100.0), (20, 101.0), (35, 105.2)]


def test_offset_since_seeks_to_the_first_entry_at_or_after_the_cutoff() -> None:
    index = [(0, 100.0), (20, 101.0), (35, 105.0)]
    assert logs.offset_since(index, 50.0, 99) == 0
    assert logs.offset_since(index, 101.0, 99) == 20
    assert logs.offset_since(index, 102.0, 99) == 35
    assert logs.offset_since(index, 200.0, 99) == 99


def test_start_offset_without_an_index_uses_the_mtime(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_text("old\n")
    os.utime(log, (1000, 1000))
    assert logs.start_offset(log, None) == 0
    assert logs.start_offset(log, 999.0) == 0 and logs.start_offset(log, 1001.0) == 4
    logs.index_path(log).write_text("0 900\ngarbage\n2 1000.5\n")
    assert logs.start_offset(log, 1000.0) == 2


def test_parse_since_takes_durations_and_times() -> None:
    assert logs.parse_since("10m", now=1000.0) == 400.0
    utc = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc).timestamp()
    assert logs.parse_since("2026-11-29T10:00:00+00:00") == utc
    assert logs.parse_since("2026-11-29T10:00:00Z") == utc  # Python 3.10 refused the Z
    with pytest.raises(UsageError, match="invalid --since 'soon'"):
        logs.parse_since("soon")


@pytest.mark.parametrize(
    ("text", "when"),
    [("0001-01-01T00:00+05:00", -62135614800.0), ("9999-12-31T23:59:59-12:00", 253402343999.0)],
)
def test_parse_since_places_a_zoned_time_near_year_1_or_9999(text: str, when: float) -> None:
    assert logs.parse_since(text) == when  # in UTC it is year 0 or 10000: out of range


def test_a_local_time_the_clock_cannot_place_is_bad_input(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    with pytest.raises(UsageError, match="invalid --since '0001-01-01': .* add its zone"):
        logs.parse_since("0001-01-01")
    from accel.cli.main import main

    assert main(["logs", "--since", "0001-01-01"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid --since") and err.count("\n") == 1, err
    assert list(project.iterdir()) == []  # no crash log: nothing written


def test_line_filter_is_a_regex_search() -> None:
    keep = logs.line_filter(r"loss=\d")
    assert keep("step 3 loss=1.2") and not keep("loss=nan")
    assert logs.line_filter(None)("anything")
    with pytest.raises(UsageError, match="invalid --grep"):
        logs.line_filter("(")
