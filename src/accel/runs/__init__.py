"""A run of ``accel launch``: everything it leaves in ``logs/runs/<run-id>/``.

- :mod:`~accel.runs.record`: ``run.json`` as a typed :class:`RunRecord` (its one reader
  and writer), :mod:`~accel.runs.status` its :class:`RunStatus`, and
  :mod:`~accel.runs.live` whether a launcher holds the run now;
- :mod:`~accel.runs.report`: what the launcher writes into the record as the run goes,
  and :mod:`~accel.runs.failures` each rank's fate in it;
- :mod:`~accel.runs.streams`, :mod:`~accel.runs.logs`, :mod:`~accel.runs.logindex` and
  :mod:`~accel.runs.follow`: the per-rank logs, written and read back;
- :mod:`~accel.runs.metrics`, :mod:`~accel.runs.view` and :mod:`~accel.runs.plot`: what
  ``accel runs show`` and ``accel runs plot`` display.

Everything here takes a :class:`~accel.layout.Layout`, never the workspace facade.
Importing the package imports neither torch nor the views; import those submodules.
"""

from __future__ import annotations

from accel.runs.live import is_live, live_run_ids, run_lock, run_lock_path
from accel.runs.record import (
    RUN_FILE,
    RunRecord,
    list_runs,
    mark_crashed,
    new_run_id,
    note_settled,
    read_record,
    read_run,
    records_this_run,
    resolve_run_id,
    run_dir,
    write_record,
)
from accel.runs.status import RunStatus

__all__ = [
    "RUN_FILE",
    "RunRecord",
    "RunStatus",
    "is_live",
    "list_runs",
    "live_run_ids",
    "mark_crashed",
    "new_run_id",
    "note_settled",
    "read_record",
    "read_run",
    "records_this_run",
    "resolve_run_id",
    "run_dir",
    "run_lock",
    "run_lock_path",
    "write_record",
]
