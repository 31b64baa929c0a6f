"""Times are shown on the reader's clock, whatever zone the run's launcher was in.

run.json holds each time with its writer's UTC offset. The views cut the string at 19
characters, so a run launched under ``TZ=Asia/Kolkata`` showed "started 08:07:40 ended
13:37:44" for a 3.8 s run (its start in UTC, its end in India), and one read in another
zone showed neither on that reader's clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accel.cli.main import main
from accel.units import local_time
from accel.workspace import Workspace

RUN = "20261206-080740-32177d"
STARTED = "2026-12-06T08:07:40.195+00:00"  # the start as accel wrote it until 2026-12-06: UTC
ENDED = "2026-12-06T13:37:44.014+05:30"  # and its end: the launcher's zone


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("name", "started", "ended"),
    [
        ("UTC", "2026-12-06 08:07:40", "2026-12-06 08:07:44"),
        ("Asia/Kolkata", "2026-12-06 13:37:40", "2026-12-06 13:37:44"),
        ("America/St_Johns", "2026-12-06 04:37:40", "2026-12-06 04:37:44"),
    ],
)
def test_a_recorded_time_is_shown_on_the_readers_clock(
    zone: Callable[[str], None], name: str, started: str, ended: str
) -> None:
    zone(name)
    assert (local_time(STARTED), local_time(ENDED)) == (started, ended)


def test_what_is_not_a_time_is_shown_as_it_is() -> None:
    assert local_time(None) == local_time("") == local_time(3) == "?"
    assert local_time("yesterday at noon, roughly") == "yesterday at noon, "


@pytest.mark.parametrize("name", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_a_time_this_clock_cannot_show_is_shown_as_it_is(
    zone: Callable[[str], None], name: str
) -> None:
    zone(name)  # in UTC, let alone on this clock, these are years 0 and 10000
    assert local_time("0001-01-01T00:00:00+05:00") == "0001-01-01T00:00:00"
    assert local_time("9999-12-31T23:59:59-12:00") == "9999-12-31T23:59:59"


def _record(project: Path, started: str, ended: str) -> None:
    folder = Workspace(project / ".accelerate").ensure().path / "logs" / "runs" / RUN
    folder.mkdir(parents=True)
    record = {
        "id": RUN,
        "name": "default",
        "status": "succeeded",
        "exit_code": 0,
        "world_size": 1,
        "started_at": started,
        "ended_at": ended,
        "attempts": [{"attempt": 0, "started_at": "2026-12-06T13:37:41.700+05:30"}],
    }
    (folder / "run.json").write_text(json.dumps(record), encoding="utf-8")


def test_runs_and_runs_show_agree_on_one_clock(
    project: Path, zone: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    _record(project, STARTED, ENDED)
    zone("America/St_Johns")
    assert main(["runs"]) == 0
    listed = capsys.readouterr().out
    assert f"{RUN}  default  succeeded  2026-12-06 04:37:40" in listed
    assert main(["runs", "show", RUN]) == 0
    shown = capsys.readouterr().out
    assert "started   2026-12-06 04:37:40   ended 2026-12-06 04:37:44" in shown


def test_runs_and_runs_show_read_a_run_of_year_1_to_9999(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _record(project, "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-12:00")
    assert main(["runs"]) == 0
    out, err = capsys.readouterr()
    assert f"{RUN}  default  succeeded  0001-01-01T00:00:00" in out and not err
    assert main(["runs", "show", RUN]) == 0
    out, err = capsys.readouterr()
    assert "started   0001-01-01T00:00:00   ended 9999-12-31T23:59:59" in out and not err
