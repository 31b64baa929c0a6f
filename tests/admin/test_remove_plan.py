"""What `accel checkpoints rm` refuses, decided without a filesystem."""

from __future__ import annotations

from accel.admin.remove import checkpoint_refusal
from accel.errors import UsageError
from accel.store.lease import LeaseHeld


def test_a_held_series_is_refused_whatever_the_flags() -> None:
    for step, force in ((3, False), (3, True), (9, True)):
        refusal = checkpoint_refusal("main", step, 9, force=force, holder="pid 7 on box")
        assert isinstance(refusal, LeaseHeld) and refusal.exit_code == 1
        assert "held by pid 7 on box" in str(refusal)


def test_the_newest_needs_force_and_older_ones_do_not() -> None:
    refusal = checkpoint_refusal("main", 9, 9, force=False, holder=None)
    assert isinstance(refusal, UsageError) and refusal.exit_code == 2
    assert "pass --force" in str(refusal)
    assert checkpoint_refusal("main", 9, 9, force=True, holder=None) is None
    assert checkpoint_refusal("main", 3, 9, force=False, holder=None) is None
