"""Readers and retention coexist: a reader holds its series against retention, and a
checkpoint removed while it is read is never called damaged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accel import Workspace
from accel.admin._reading import read_checkpoint, reading
from accel.errors import IntegrityError, UsageError
from accel.store import series as series_mod
from accel.store.lease import SeriesLease, catch_up_retention, retention_owed
from accel.store.series import Found


def _save(ws: Workspace, step: int) -> None:
    ws.checkpoints.save({"w": torch.full((4,), float(step)), "step": step}, step)


def _steps(ws: Workspace) -> list[int]:
    return [info.step for info in ws.checkpoints.list()]


@pytest.fixture
def kept_one(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.setenv("ACCEL_CHECKPOINTS_KEEP_LAST", "1")
    return Workspace.discover()


def test_retention_waits_for_readers_and_catches_up(kept_one: Workspace) -> None:
    _save(kept_one, 1)
    with reading(kept_one, None):
        _save(kept_one, 2)
        _save(kept_one, 3)
        assert _steps(kept_one) == [1, 2, 3]  # nothing retired under a reader
    _save(kept_one, 4)
    assert _steps(kept_one) == [4]


def test_the_newest_is_read_again_when_the_one_picked_was_removed(kept_one: Workspace) -> None:
    _save(kept_one, 1)
    seen = []

    def read(found: Found) -> int:
        seen.append(found.manifest.step)
        if len(seen) == 1:  # as a clean would: step 2 committed, step 1 gone mid-read
            _save(kept_one, 2)
            series_mod.retire(found.path)
            raise IntegrityError(f"{found.path}/state.tensors is missing; it is damaged")
        return found.manifest.step

    assert read_checkpoint(kept_one, None, None, read) == 2 and seen == [1, 2]


def test_a_named_step_removed_mid_read_is_said_so_not_damaged(kept_one: Workspace) -> None:
    _save(kept_one, 1)

    def read(found: Found) -> None:
        series_mod.retire(found.path)
        raise IntegrityError(f"{found.path}/state.tensors is missing; it is damaged")

    with pytest.raises(UsageError, match="step 1 was removed while being read") as caught:
        read_checkpoint(kept_one, 1, None, read)
    assert "damaged" not in str(caught.value)


def test_a_damaged_checkpoint_that_is_still_there_stays_damaged(kept_one: Workspace) -> None:
    _save(kept_one, 1)

    def read(found: Found) -> None:
        raise IntegrityError("it is damaged")

    with pytest.raises(IntegrityError, match="damaged"):
        read_checkpoint(kept_one, None, None, read)


def test_retention_a_reader_held_back_is_paid_when_the_run_and_the_reader_are_done(
    kept_one: Workspace,
) -> None:
    """A run's last saves under an export: the run ends with one checkpoint, not three."""
    with SeriesLease(kept_one.layout, "default"):  # an earlier run
        _save(kept_one, 1)
    with reading(kept_one, None):
        with SeriesLease(kept_one.layout, "default"):  # the run saving, for its life
            _save(kept_one, 2)
            _save(kept_one, 3)
            assert retention_owed(kept_one.layout) == {"default": 1}
        assert _steps(kept_one) == [1, 2, 3]  # the reader still reads: nothing goes
    assert _steps(kept_one) == [3]  # the reader let go of a series no run holds: paid
    assert retention_owed(kept_one.layout) == {}


def test_retention_owed_to_a_live_run_waits_for_its_next_save(kept_one: Workspace) -> None:
    with SeriesLease(kept_one.layout, "default"):
        _save(kept_one, 1)
        with reading(kept_one, None):
            _save(kept_one, 2)
        assert _steps(kept_one) == [1, 2]  # the run's, not the reader's, to retire
        _save(kept_one, 3)
        assert _steps(kept_one) == [3] and retention_owed(kept_one.layout) == {}


@pytest.mark.parametrize(
    "record",
    [
        '{"keep_last": 0}',
        '{"keep_last": true}',
        '{"keep_last": 1.0}',
        '{"keep_last": "1"}',
        "[1]",
        "{",
        "",
    ],
)
def test_a_retention_record_accel_did_not_write_removes_nothing(ws: Workspace, record: str) -> None:
    for step in (1, 2, 3):
        _save(ws, step)
    (ws.locks_dir / "series-default.retention.json").write_text(record)
    assert retention_owed(ws.layout) == {} and catch_up_retention(ws.layout) == []
    with reading(ws, None):
        pass
    assert _steps(ws) == [1, 2, 3]


def test_a_linked_retention_record_is_not_read(ws: Workspace, tmp_path: Path) -> None:
    for step in (1, 2):
        _save(ws, step)
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"keep_last": 1}')
    (ws.locks_dir / "series-default.retention.json").symlink_to(outside)
    assert retention_owed(ws.layout) == {}
    with reading(ws, None):
        pass
    assert _steps(ws) == [1, 2]


def test_a_reader_going_on_with_an_invalid_config_pays_no_retention(
    kept_one: Workspace,
) -> None:
    # `checkpoints verify` reads with a broken config (a warning): it changes nothing
    with SeriesLease(kept_one.layout, "default"):
        _save(kept_one, 1)
    kept_one.config_file.write_text("launch:\n  num_procs: 2\n")  # an unknown key
    reader = Workspace.discover()
    assert reader.salvage_config() is not None
    with reading(reader, None), SeriesLease(kept_one.layout, "default"):
        _save(kept_one, 2)
        _save(kept_one, 3)
    assert _steps(kept_one) == [1, 2, 3]
    assert retention_owed(kept_one.layout) == {"default": 1}
