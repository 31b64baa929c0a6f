"""``end()`` returns only once gloo's worker threads have finished what they hold
(accel.accelerator._gloo_idle): a worker that takes the GIL after the interpreter began
to finalize aborts a rank whose run had finished ("terminate called without an active
exception", exit -6; stop 61's CI)."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from accel.accelerator._gloo_idle import parked, wait_for_gloo_workers
from run_helpers import two_ranks

SCRIPT = Path(__file__).parent / "scripts" / "gloo_late_worker.py"
X86_FUTEX = 202

# Lines of /proc/self/task/<tid>/syscall as this machine wrote them (x86_64).
IDLE = "202 0x5571632e6b84 0x189 0x0 0x0 0x0 0xffffffff 0x7fe0e4d12d10 0x7fe1070a3f16"
SHAPES = {
    "a worker waiting for the GIL (a timed wait)": (
        "202 0x7fda0ad76f20 0x89 0x0 0x7fd9ea511b10 0x0 0xffffffff 0x7fd9ea511a80 0x7fda0a6a3f7b"
    ),
    "a worker blocked on the queue's mutex": (
        "202 0x5571632e6b58 0x80 0x2 0x0 0x0 0x0 0x7fe0e4d12c70 0x7fe1070a3f16"
    ),
    "a worker in a callback's sleep": (
        "230 0x1 0x0 0x7fe0e4d12b60 0x0 0x0 0x0 0x7fe0e4d12b30 0x7fe1070d2e95"
    ),
    "a worker running": "running",
    "a line cut short": "202 0x5571632e6b84 0x189",
    "a line that is not numbers": "202 0x5571632e6b84 0xzz 0x0 0x0",
}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env.update(ACCEL_WORKSPACE=str(tmp_path / ".accelerate"), OMP_NUM_THREADS="1")
    return env


def test_a_worker_asleep_on_its_empty_queue_is_parked() -> None:
    assert parked(IDLE, X86_FUTEX)
    assert not parked(IDLE, 98)  # another machine's futex number: another call


@pytest.mark.parametrize("line", SHAPES.values(), ids=list(SHAPES))
def test_a_worker_doing_anything_else_is_busy(line: str) -> None:
    assert not parked(line, X86_FUTEX)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_a_thread_whose_name_is_not_text_is_not_a_worker_and_no_error() -> None:
    named, done = threading.Event(), threading.Event()

    def run() -> None:  # any code in the process may name its threads any bytes
        ctypes.CDLL(None).prctl(15, b"\xff\xfe thread", 0, 0, 0)
        named.set()
        done.wait()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        named.wait()
        assert wait_for_gloo_workers() is True
    finally:
        done.set()
        thread.join()


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how", ["accel", "joined"])
def test_end_returns_after_the_workers_finished_with_the_last_collective(
    tmp_path: Path, how: str
) -> None:
    args = [str(tmp_path)] + (["joined"] if how == "joined" else [])
    assert two_ranks(SCRIPT, args, _env(tmp_path)) == [0, 0]
    for rank in (0, 1):
        assert (tmp_path / f"rank-{rank}.txt").read_text() == "done 1"


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_a_script_that_raises_after_its_last_collective_exits_1_not_aborted(
    tmp_path: Path,
) -> None:
    assert two_ranks(SCRIPT, [str(tmp_path), "raises"], _env(tmp_path)) == [1, 1]
