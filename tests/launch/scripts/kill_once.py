"""Run examples/train.py, but rank 1 is SIGKILLed in the first attempt.

argv: WHERE EXAMPLE N [example args...]

WHERE is ``step`` (at the start of its N-th optimizer step), ``write`` (while it
writes its snapshot of step N into the memory tier, after the file's first bytes),
``both`` (every rank, at the start of its N-th step) or ``full`` (as ``step``; then, in
the restart, rank 0 fills the shared memory at ``ACCEL_SHM_DIR`` before training,
leaving 2 MiB, as another job on the machine would) or ``restore`` (as ``step``; then
rank 1 of the first restart is SIGKILLed while it restores the checkpoint, after
reading its state and before using it).
"""

import contextlib
import os
import runpy
import signal
import sys

import torch

where, example, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.argv = [example, *sys.argv[4:]]
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
doomed = first and (os.environ["RANK"] == "1" or where == "both")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if where == "full" and not first and os.environ["RANK"] == "0":
    base = os.environ["ACCEL_SHM_DIR"]
    stats = os.statvfs(base)
    with open(os.path.join(base, "filler"), "wb") as filler:
        filler.write(b"\0" * (stats.f_bavail * stats.f_frsize - (2 << 20)))

restore_doomed = os.environ["TORCHELASTIC_RESTART_COUNT"] == "1" and os.environ["RANK"] == "1"
if where == "restore" and restore_doomed:
    from accel.store import checkpoints

    original_load = checkpoints.load_tensor_file

    def load_and_die(*args, **kwargs):
        original_load(*args, **kwargs)
        die()

    checkpoints.load_tensor_file = load_and_die

if doomed and where in ("step", "both", "full", "restore"):
    calls = 0
    original_step = torch.optim.SGD.step

    def step(self, *args, **kwargs):
        global calls
        calls += 1
        if calls == kill_at:
            die()
        return original_step(self, *args, **kwargs)

    torch.optim.SGD.step = step
elif doomed and where == "write":
    from accel.store import _inplace, memtier

    original_write = memtier.SlotWriter.write
    original_pieces = _inplace.in_memory_pieces

    @contextlib.contextmanager
    def torn(tree):
        # The file's first bytes go where the writer puts them (in place, into the file
        # it wrote steps ago, or into a new one), and then it dies.
        with original_pieces(tree) as (size, source):

            def first_then_die():
                yield next(source)
                die()

            yield size, first_then_die()

    def write(self, step, series, trees, **kwargs):
        if step == kill_at:
            _inplace.in_memory_pieces = torn
        return original_write(self, step, series, trees, **kwargs)

    memtier.SlotWriter.write = write
runpy.run_path(example, run_name="__main__")
