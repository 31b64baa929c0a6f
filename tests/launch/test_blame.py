"""accel.launch.blame: who is to blame, decided from recorded events (pure)."""

from __future__ import annotations

import signal

from accel.launch.blame import HangClue, blame, describe_stuck, in_collective, stuck_ranks
from accel.runs.failures import (
    ALSO_FAILED,
    BY_DIVERGENCE,
    BY_HANG,
    EXITED,
    FAILED,
    STOPPED,
    STUCK,
    RankFailure,
    Stop,
    headline,
    recorded_verdict,
    stuck_line,
)


def end(
    rank: int,
    code: int | None,
    died: float | None,
    *,
    kind: str | None = None,
    raised: float | None = None,
    polled: float = 100.0,
) -> RankFailure:
    return RankFailure(
        rank=rank,
        local_rank=rank,
        pid=1000 + rank,
        exitcode=code,
        attempt=0,
        timestamp=polled,  # torch's poll: the same coarse time for everyone
        type=kind,
        message="boom" if kind else None,
        raised_at=raised,
        died_at=died,
    )


def fates(verdict: object) -> dict[int, str]:
    return {f.rank: str(f.fate) for f in verdict.failures}  # type: ignore[attr-defined]


def test_a_killed_rank_is_blamed_not_the_peer_whose_collective_it_broke() -> None:
    # rank 1 SIGKILLed (the OOM killer); rank 0 raised "Connection reset by peer" just
    # after, and was still exiting when accel began stopping (it died of the SIGTERM).
    verdict = blame(
        [
            end(0, -signal.SIGTERM, 10.30, kind="RuntimeError", raised=10.05),
            end(1, -signal.SIGKILL, 10.00),
        ],
        Stop(10.20),
    )
    assert fates(verdict) == {0: ALSO_FAILED, 1: FAILED}
    assert verdict.first is not None and verdict.first.rank == 1
    assert "out of memory" in verdict.first.explanation
    said = headline(verdict)
    assert said is not None and said.startswith("rank 1 failed first: killed (SIGKILL)")


def test_a_dead_peer_error_yields_to_the_death_it_reports_even_if_seen_first() -> None:
    # Under load the launcher may see rank 1's exit after rank 0 recorded the error it
    # caused: the error's words say which is the consequence.
    reset = RankFailure(
        0,
        0,
        1000,
        1,
        0,
        100.0,
        "RuntimeError",
        "pair.cc:553] Connection closed by peer",
        raised_at=10.00,
    )
    verdict = blame([reset, end(1, -signal.SIGKILL, 10.05)])
    assert fates(verdict) == {0: ALSO_FAILED, 1: FAILED}
    # A peer on another node died long before: then the reset is all this node saw.
    alone = blame([reset, end(1, -signal.SIGKILL, 30.0)])
    assert alone.first is not None and alone.first.rank == 0


def test_ranks_accel_stopped_are_stopped_whatever_they_exited_with() -> None:
    verdict = blame(
        [
            end(0, 1, 5.0, kind="ValueError", raised=4.9),
            end(1, -signal.SIGTERM, 5.5),
            end(2, 1, 5.6),  # handled SIGTERM and exited 1: still accel's doing
            end(3, -signal.SIGKILL, 15.5),  # ignored SIGTERM, killed after the grace period
        ],
        Stop(5.2),
    )
    assert fates(verdict) == {0: FAILED, 1: STOPPED, 2: STOPPED, 3: STOPPED}
    stopped = verdict.with_fate(STOPPED)[2]
    assert stopped.explanation == "stopped by accel (SIGKILL) after rank 0 failed"
    assert "out of memory" not in stopped.explanation


def test_the_earliest_own_failure_wins_whatever_its_kind() -> None:
    # An exception no longer beats a signal: time decides.
    verdict = blame(
        [end(0, -signal.SIGSEGV, 3.0, raised=2.0), end(1, 1, 2.6, kind="RuntimeError", raised=2.5)]
    )
    assert fates(verdict) == {0: FAILED, 1: ALSO_FAILED}
    # Same instant: the lower rank, deterministically.
    tie = blame([end(3, 1, 7.0), end(1, 1, 7.0)])
    assert tie.first is not None and tie.first.rank == 1


def test_old_records_without_exit_times_fall_back_to_torchs_poll_time() -> None:
    verdict = blame([end(0, 1, None, polled=9.0), end(1, 1, None, polled=8.0)])
    assert verdict.first is not None and verdict.first.rank == 1


def test_a_rank_that_finished_before_is_not_a_failure_and_an_unseen_one_was_stopped() -> None:
    verdict = blame([end(0, 0, 1.0), end(1, 1, 2.0), end(2, None, None)], Stop(2.5))
    assert fates(verdict) == {0: EXITED, 1: FAILED, 2: STOPPED}
    assert blame([]).first is None and headline(blame([])) is None


MAIN = '  File "/site/accel/launch/_bootstrap.py", line 127 in main'
BARRIER = (
    "Current thread 0x1 (most recent call first):\n"
    '  File "/site/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
    '  File "/site/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
    '  File "train.py", line 15 in <module>\n' + MAIN
)
SLEEP = (
    "Current thread 0x2 (most recent call first):\n"
    '  File "train.py", line 12 in stuck_in_sleep\n'
    '  File "train.py", line 20 in <module>\n' + MAIN
)
IMPORTING = (
    "Current thread 0x3 (most recent call first):\n"
    '  File "/site/torch/distributed/rpc/__init__.py", line 9 in <module>\n'
    '  File "<frozen importlib._bootstrap>", line 1176 in _find_and_load\n' + MAIN
)
SAVER_THREAD = (
    "Thread 0x9 (most recent call first):\n"
    '  File "/site/torch/distributed/distributed_c10d.py", line 10 in broadcast\n'
)


def test_in_collective_reads_the_main_threads_frames() -> None:
    assert in_collective(BARRIER)
    assert not in_collective(SLEEP)
    assert not in_collective(IMPORTING)  # importing torch.distributed is not waiting
    assert not in_collective(SAVER_THREAD + "\n" + SLEEP)  # a background thread's wait
    assert in_collective(SAVER_THREAD)  # no main thread known: any thread counts


def test_after_a_hang_the_rank_outside_a_collective_is_stuck() -> None:
    clue = HangClue(stacks={0: BARRIER, 1: SLEEP}, quiet={0: 30.0, 1: 12.0})
    assert stuck_ranks(clue) == {1}  # although rank 0 has been quiet longer
    verdict = blame(
        [end(0, -signal.SIGKILL, 50.1), end(1, -signal.SIGKILL, 50.1)],
        Stop(50.0, BY_HANG),
        clue,
    )
    assert fates(verdict) == {0: STOPPED, 1: STUCK}
    root = verdict.first
    assert root is not None and root.rank == 1 and root.traceback == SLEEP
    assert root.message == "stuck in stuck_in_sleep (train.py), not in a collective"
    assert "out of memory" not in root.explanation
    said = headline(verdict)
    assert said == (
        "rank 1 is stuck in stuck_in_sleep (train.py), not in a collective; rank(s) 0 waited for it"
    )


def test_the_hang_message_names_the_suspect_only_when_one_stands_out() -> None:
    clue = HangClue(stacks={0: BARRIER, 1: SLEEP}, quiet={0: 30.0, 1: 12.0})
    assert describe_stuck(clue) == (
        "rank 1 is stuck in stuck_in_sleep (train.py), not in a collective"
    )
    assert describe_stuck(HangClue(stacks={0: SLEEP, 1: SLEEP}, quiet={0: 3.0, 1: 3.0})) is None


def test_every_stuck_rank_is_named_in_one_bounded_line() -> None:
    clue = HangClue(stacks={0: SLEEP, 1: SLEEP}, quiet={0: 3.0, 1: 3.0})
    verdict = blame([end(0, -9, 50.1), end(1, -9, 50.1)], Stop(50.0, BY_HANG), clue)
    assert fates(verdict) == {0: STUCK, 1: STUCK}
    assert headline(verdict) == (
        "ranks 0, 1 are stuck in stuck_in_sleep (train.py), not in a collective"
    )
    many = [(r, "stuck outside a collective") for r in range(20)] + [
        (20 + i, f"stuck in f{i} (a.py), not in a collective") for i in range(4)
    ]
    assert stuck_line(many) == (
        "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 12 more are stuck outside a collective; "
        "rank 20 is stuck in f0 (a.py), not in a collective; "
        "rank 21 is stuck in f1 (a.py), not in a collective; 2 more rank(s) are stuck elsewhere"
    )


def test_when_the_stacks_do_not_tell_the_rank_quiet_the_longest_is_stuck() -> None:
    every = HangClue(stacks={0: BARRIER, 1: BARRIER}, quiet={0: 30.0, 1: 12.0})
    assert stuck_ranks(every) == {0}
    none = HangClue(stacks={0: SLEEP, 1: SLEEP}, quiet={0: 5.0, 1: 8.0})
    assert stuck_ranks(none) == {1}
    assert stuck_ranks(HangClue(stacks={}, quiet={0: 3.0, 1: 3.0})) == {0, 1}
    assert stuck_ranks(None) == set()


def test_a_divergence_stop_names_the_rank_that_logged_it() -> None:
    stop = Stop(9.0, BY_DIVERGENCE, (0,), "metric 'loss' became NaN at step 80 on rank 0")
    verdict = blame([end(0, -signal.SIGTERM, 9.2), end(1, -signal.SIGTERM, 9.2)], stop)
    assert fates(verdict) == {0: FAILED, 1: STOPPED}
    assert headline(verdict) == (
        "rank 0 failed first: Diverged: metric 'loss' became NaN at step 80 on rank 0"
    )


def test_a_recorded_verdict_reads_back_the_same() -> None:
    verdict = blame(
        [end(0, -signal.SIGTERM, 1.3, kind="RuntimeError", raised=1.1), end(1, -9, 1.0)],
        Stop(1.2),
    )
    entry = {"attempt": 0, "failures": [f.to_json() for f in verdict.failures]}
    again = recorded_verdict(entry)
    assert again is not None and fates(again) == fates(verdict)
    assert headline(again) == headline(verdict)
    assert recorded_verdict({"failures": [{"rank": 0, "exitcode": 1}]}) is None  # older record


ARRIVAL = (
    "Current thread 0x4 (most recent call first):\n"
    '  File "/site/accel/store/collectives.py", line 79 in _wait\n'
    '  File "/site/accel/store/collectives.py", line 61 in arrive\n'
    '  File "/site/accel/store/checkpoints.py", line 120 in save\n'
    '  File "/site/accel/accelerator.py", line 190 in save_state\n'
    '  File "train.py", line 15 in <module>\n' + MAIN
)
WAIT_FOR_EVERYONE = (
    "Current thread 0x5 (most recent call first):\n"
    '  File "/site/accel/accelerator/__init__.py", line 225 in wait_for_everyone\n'
    '  File "train.py", line 15 in <module>\n' + MAIN
)
IMPORTING_ACCEL = (
    "Current thread 0x6 (most recent call first):\n"
    '  File "/site/accel/store/collectives.py", line 1 in <module>\n' + MAIN
)
WRITING_UNDER_ATTEMPT = (  # a rank writing its files: the error map is no wait
    "Current thread 0x7 (most recent call first):\n"
    '  File "/site/accel/store/_stream.py", line 80 in write\n'
    '  File "/site/accel/store/collectives.py", line 180 in attempt\n' + MAIN
)


def test_accels_own_collectives_are_waits_in_a_collective() -> None:
    assert in_collective(ARRIVAL)  # save_state's arrival wait polls the store
    assert in_collective(WAIT_FOR_EVERYONE)
    assert not in_collective(IMPORTING_ACCEL)
    assert not in_collective(WRITING_UNDER_ATTEMPT)
    clue = HangClue(stacks={0: ARRIVAL, 1: SLEEP}, quiet={0: 30.0, 1: 12.0})
    assert stuck_ranks(clue) == {1}
    assert describe_stuck(clue) == (
        "rank 1 is stuck in stuck_in_sleep (train.py), not in a collective"
    )


def test_a_rank_that_never_printed_counts_as_quiet_since_its_start() -> None:
    from accel.hang.detect import check_hang

    # Only rank 0 prints (the usual case): rank 1 has no activity at all.
    verdict = check_hang({0: 100.0}, since=40.0, now=130.0, timeout=5, ranks=[0, 1])
    assert verdict is not None and verdict.quiet == {0: 30.0, 1: 90.0}
    clue = HangClue(stacks={0: BARRIER, 1: SLEEP}, quiet=verdict.quiet)
    assert stuck_ranks(clue) == {1}
    # When the stacks do not tell, the rank that never printed went quiet first.
    assert stuck_ranks(HangClue(stacks={0: SLEEP, 1: SLEEP}, quiet=verdict.quiet)) == {1}


def test_a_rank_with_a_stack_but_no_quiet_time_still_counts() -> None:
    # A record from before every rank had a quiet time: rank 0 in the barrier is not
    # blamed because the quiet times named only it.
    clue = HangClue(stacks={0: BARRIER, 1: SLEEP}, quiet={0: 30.0})
    assert stuck_ranks(clue) == {1}
