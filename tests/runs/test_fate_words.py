"""Rank fates and stop reasons are enums in the code and plain words in run.json."""

from __future__ import annotations

import json

from accel.runs.failures import ALSO_FAILED, BY_HANG, Fate, StopReason


def test_fates_and_stop_reasons_read_as_the_words_run_json_records() -> None:
    assert [f.value for f in Fate] == ["failed", "also failed", "stopped", "stuck", "exited"]
    assert [r.value for r in StopReason] == ["failure", "hang", "signal", "diverged"]
    record = json.loads(json.dumps({"fate": ALSO_FAILED, "stopped_by": BY_HANG}))
    assert record == {"fate": "also failed", "stopped_by": "hang"}
    assert Fate(record["fate"]) is ALSO_FAILED and record["fate"] == ALSO_FAILED
    assert f"rank 1 {ALSO_FAILED}: {BY_HANG:>5}" == "rank 1 also failed:  hang"
    assert {"stopped": 1}[Fate.STOPPED] == 1  # a fate read back as text finds its entry
