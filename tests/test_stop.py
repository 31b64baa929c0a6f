"""The stop watch behind Accelerator.should_stop(): a signal is noted once the script
listens, and does what it did before when nobody listens."""

from __future__ import annotations

import os
import signal

from accel._accel.stop import StopWatch, agreed


def test_a_listening_script_gets_the_signal_noted_not_its_end() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    watch = StopWatch()
    try:
        watch.listening = True
        assert not agreed(watch.signum is not None, 1, "cpu")
        os.kill(os.getpid(), signal.SIGTERM)  # would end this process without the watch
        os.kill(os.getpid(), signal.SIGUSR1)
        assert watch.signum == signal.SIGTERM  # the first one
        assert agreed(watch.signum is not None, 1, "cpu")
    finally:
        watch.restore()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_without_a_listener_the_previous_handler_runs() -> None:
    came: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: came.append(signum))
    watch = StopWatch()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert came == [signal.SIGUSR1] and watch.signum == signal.SIGUSR1
    finally:
        watch.restore()
        signal.signal(signal.SIGUSR1, previous)
