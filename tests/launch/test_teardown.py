"""The teardown judge: a worker whose script returned has the script's result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from accel.launch import _bootstrap
from accel.launch._ends import rank_ends
from accel.launch.deaths import Exit
from accel.launch.teardown import (
    ENDED,
    HUNG,
    Returned,
    Teardown,
    TeardownJudge,
    read_returned,
)

BOOTSTRAP = Path(_bootstrap.__file__)


class Fake:
    def __init__(self, tmp_path: Path) -> None:
        self.now = 100.0
        self.killed: list[int] = []
        self.told: list[Teardown] = []
        self.seen: list[tuple[int, Returned]] = []
        self.error_file = str(tmp_path / "error-1.json")
        self.judge = TeardownJudge(
            10.0,
            self.told.append,
            lambda rank, returned: self.seen.append((rank, returned)),
            grace=5.0,
            clock=lambda: self.now,
            kill=self.killed.append,
        )

    def returned(
        self, code: int, at: float, handlers_done_at: float | None = None, message: str = ""
    ) -> None:
        data: dict[str, object] = {"code": code, "pid": 4242, "returned_at": at}
        if handlers_done_at is not None:
            data["handlers_done_at"] = handlers_done_at
        if message:
            data["message"] = message
        Path(_bootstrap.returned_path(self.error_file)).write_text(json.dumps(data))

    def poll(self, polled: int | None) -> int | None:
        return self.judge.exitcode(1, self.error_file, polled)


def test_a_worker_whose_script_did_not_return_is_as_torch_sees_it(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    assert [fake.poll(None), fake.poll(-6), fake.poll(1), fake.poll(0)] == [None, -6, 1, 0]
    fake.now = 1e9
    assert fake.poll(None) is None and not fake.killed and not fake.told


def test_a_death_in_teardown_keeps_the_script_result_and_is_told_once(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    fake.returned(0, at=99.0)
    assert [fake.poll(-6), fake.poll(-6)] == [0, 0]
    (told,) = fake.told
    assert (told.what, told.code, told.exitcode) == (ENDED, 0, -6)
    assert told.message == "rank 1 finished; died of SIGABRT in teardown"


def test_a_script_that_exited_non_zero_still_fails(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    fake.returned(3, at=99.0)
    assert fake.poll(3) == 3 and not fake.told
    assert fake.poll(-11) == 3
    assert fake.told[0].message == "rank 1 finished with exit code 3; died of SIGSEGV in teardown"


def test_accels_own_stop_reaching_a_rank_that_exited_is_no_death_in_teardown(
    tmp_path: Path,
) -> None:
    fake = Fake(tmp_path)
    fake.returned(1, at=99.0, message="fatal: config missing")
    assert fake.poll(None) is None
    assert fake.seen == [(1, read_returned(fake.error_file))]  # told once, before any end
    assert fake.seen[0][1].message == "fatal: config missing"
    fake.judge.stopping(None)  # torch's SIGTERM
    assert fake.poll(-signal.SIGTERM) == 1 and not fake.told
    assert len(fake.seen) == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "aborted").mkdir()
    other = Fake(tmp_path / "other")
    other.returned(0, at=99.0)
    other.judge.stopping(signal.SIGINT)  # the launcher's Ctrl-C, forwarded
    assert other.poll(-signal.SIGINT) == 0 and not other.told
    aborted = Fake(tmp_path / "aborted")
    aborted.returned(0, at=99.0)
    aborted.judge.stopping(None)
    assert aborted.poll(-signal.SIGABRT) == 0  # not accel's signal: its teardown's
    assert aborted.told[0].message == "rank 1 finished; died of SIGABRT in teardown"


def test_a_hang_after_the_exit_handlers_is_ended_after_the_grace(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    fake.returned(0, at=100.0, handlers_done_at=100.5)
    fake.now = 105.4
    assert fake.poll(None) is None and not fake.killed
    fake.now = 105.5
    assert [fake.poll(None), fake.poll(None)] == [None, None]
    assert fake.killed == [4242]  # once
    fake.now = 109.0
    assert fake.poll(-9) == 0
    (told,) = fake.told
    assert told.what == HUNG and told.seconds == pytest.approx(5.5)
    assert told.message == "rank 1 finished; hung in teardown, ended after 6 s"


def test_exit_handlers_get_the_stop_grace_period_first(tmp_path: Path) -> None:
    fake = Fake(tmp_path)
    fake.returned(0, at=100.0)  # a handler still runs (a pending checkpoint, say)
    fake.now = 114.9
    assert fake.poll(None) is None and not fake.killed
    fake.now = 115.0
    fake.poll(None)
    assert fake.killed == [4242]


@pytest.mark.parametrize(
    "text", ["", "{", '{"code": "x"}', "[]", '{"code": 0}', "[" * 100_000 + "]" * 100_000]
)
def test_an_unreadable_note_is_no_note(tmp_path: Path, text: str) -> None:
    error_file = str(tmp_path / "error-0.json")
    Path(_bootstrap.returned_path(error_file)).write_text(text)
    assert read_returned(error_file) is None


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ("pass", 0, None),
        ("import sys; sys.exit(4)", 4, None),
        # the status the OS gives: -1 was noted as -1, read as SIGHUP; 256 failed the run
        ("import sys; sys.exit(-1)", 255, None),
        ("import sys; sys.exit(256)", 0, None),
        ("import sys; sys.exit('no config\\n  in ' + 'x' * 600)", 1, "no config in " + "x" * 484),
        ("raise ValueError('no')", None, None),
    ],
)
def test_the_bootstrap_notes_a_return_and_the_end_of_the_exit_handlers(
    tmp_path: Path, body: str, code: int | None, message: str | None
) -> None:
    script = tmp_path / "script.py"
    script.write_text(f"import atexit, time\natexit.register(time.sleep, 0.2)\n{body}\n")
    error_file = tmp_path / "error-0.json"
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)}
    done = subprocess.run(
        [sys.executable, str(BOOTSTRAP), str(script)], env=env, capture_output=True, timeout=50
    )
    returned = read_returned(str(error_file))
    if code is None:  # raised: the error file says it, and nothing says it returned
        assert done.returncode == 1 and returned is None and error_file.exists()
        return
    assert done.returncode == code and returned is not None
    assert returned.code == code and returned.handlers_done_at is not None
    assert returned.message == (message and message + "...")  # one line, bounded
    assert returned.handlers_done_at - returned.returned_at >= 0.2  # after the script's handler


class SeenExits:
    """An ExitWatch that has seen these ends (the real one waits on processes)."""

    def __init__(self, exits: dict[int, Exit]) -> None:
        self._exits = exits

    def settle(self, timeout: float) -> None:
        return None

    def exits(self) -> dict[int, Exit]:
        return dict(self._exits)


def test_a_rank_that_finished_is_no_failure_when_another_rank_fails() -> None:
    seen = SeenExits({0: Exit(10.0, 1), 1: Exit(9.0, -6)})  # rank 1 aborted in teardown
    finished = {1: Returned(0, 101, 8.0)}
    ends = rank_ends(0, {}, {0: 100, 1: 101}, seen, finished)  # type: ignore[arg-type]
    assert [(e.rank, e.exitcode) for e in ends] == [(0, 1)]
    ends = rank_ends(0, {}, {0: 100, 1: 101}, seen)  # type: ignore[arg-type]
    assert [(e.rank, e.exitcode) for e in ends] == [(0, 1), (1, -6)]


def test_a_rank_whose_script_exited_non_zero_failed_when_it_exited() -> None:
    seen = SeenExits({0: Exit(10.0, 1), 1: Exit(10.5, -15)})  # rank 1: accel's SIGTERM
    finished = {0: Returned(1, 100, 9.9, message="fatal: no config"), 1: Returned(7, 101, 10.1)}
    ends = rank_ends(0, {}, {0: 100, 1: 101}, seen, finished)  # type: ignore[arg-type]
    said = [(e.rank, e.exitcode, e.raised_at, e.died_at, e.summary) for e in ends]
    assert said == [
        (0, 1, 9.9, 10.0, "SystemExit: fatal: no config"),
        (1, 7, 10.1, 10.5, "exited with code 7"),
    ]


def test_a_worker_is_never_ended_while_a_background_save_runs_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from accel.store.async_save import AsyncSave, saving_note

    fake = Fake(tmp_path)
    fake.returned(0, at=100.0)  # the interpreter waits for the save's thread
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", fake.error_file)
    release, seen = threading.Event(), []

    def write() -> int:
        seen.append(os.path.exists(saving_note(fake.error_file)))
        release.wait(10)
        return 1

    save = AsyncSave(write).start()
    # marked before start() returns, not when the thread gets to run (it raced under load)
    assert os.path.exists(saving_note(fake.error_file))
    try:
        fake.now = 1e9
        assert fake.poll(None) is None and not fake.killed
    finally:
        release.set()
        assert save.join() == 1
    assert seen == [True] and not os.path.exists(saving_note(fake.error_file))
    fake.poll(None)
    assert fake.killed == [4242]  # once the save is done, the grace holds again
