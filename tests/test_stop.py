"""The stop watch behind Accelerator.should_stop(): SIGTERM is noted once the script
listens, and does what it did before when nobody listens (its handler is not even
installed). SIGUSR1 stays the stack dump's (accel.hang.worker)."""

from __future__ import annotations

import os
import signal

from accel.accelerator._stop import StopWatch, agreed


def test_a_listening_script_gets_the_signal_noted_not_its_end() -> None:
    before = signal.getsignal(signal.SIGTERM)
    watch = StopWatch()
    try:
        watch.listen()
        assert signal.getsignal(signal.SIGUSR1) != watch._note  # the stack dump's signal
        assert not agreed(watch.signum is not None, 1, "cpu")
        os.kill(os.getpid(), signal.SIGTERM)  # would end this process without the watch
        assert watch.signum == signal.SIGTERM
        assert agreed(watch.signum is not None, 1, "cpu")
    finally:
        watch.restore()
    assert signal.getsignal(signal.SIGTERM) == before


def test_without_a_listener_the_previous_handler_runs() -> None:
    came: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: came.append(signum))
    watch = StopWatch()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert came == [signal.SIGTERM] and watch.signum is None
    finally:
        watch.restore()
        signal.signal(signal.SIGTERM, previous)


def test_until_the_script_listens_sigterm_keeps_its_own_disposition() -> None:
    # The default ends the process in the kernel, at once; a Python handler would run
    # only when the C++ call the main thread is in returns (a rank stopped after its
    # peer's crash lived a backward longer).
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    watch = StopWatch()
    try:
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        watch.listen()
        assert signal.getsignal(signal.SIGTERM) == watch._note
    finally:
        watch.restore()
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
