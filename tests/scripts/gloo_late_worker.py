"""Two ranks whose last collective keeps a gloo worker busy past ``end()``'s barrier:
``gloo_late_worker.py OUT [joined]``; each rank writes OUT/rank-<R>.txt, ``done 1``
when the worker had finished before ``end()`` returned, ``done 0`` when not.

What the worker does late is what aborted stop 61's CI rank: it drops its reference to
the collective's tensor after the script has dropped Python's, and that takes the GIL
(torch frees the tensor's Python object). Here the tensor has a finalizer that sleeps,
as a worker starved on a busy machine is late. To make the worker hold the last
reference, the future's callback (a DDP comm hook's runs there too) keeps it busy while
the script drops its own. The collective is on a second group, which ``end()``'s
barrier does not wait for. With ``joined`` the script starts the group itself
(torchrun's way) and destroys it after ``end()``; with ``raises`` the script raises
instead of calling ``end()``: the exit handler must end the rank with exit code 1."""

import os
import sys
import time
import weakref
from pathlib import Path

import torch
import torch.distributed as dist

out = Path(sys.argv[1])
joined, raises = sys.argv[2:] == ["joined"], sys.argv[2:] == ["raises"]
rank = int(os.environ["RANK"])
if joined:
    dist.init_process_group("gloo")

from accel import Accelerator  # noqa: E402 - after the script's own group, as torchrun scripts

acc = Accelerator(cpu=True)
# A second group, as DDP's subgroups, FSDP's hybrid shards or a DeviceMesh make; kept
# referenced, as DDP keeps its group, so destroy_process_group() leaves its workers
# running. end()'s barrier is on the default group: it does not wait for this one's.
side = dist.new_group(backend="gloo")
finished: list[bool] = []


def freed() -> None:  # runs where the tensor's last reference goes
    time.sleep(0.5)
    finished.append(True)


def callback(fut: torch.futures.Future) -> None:  # on the worker: the script drops its refs
    time.sleep(0.2)


# Rank 1 joins the collective only once rank 0's callback is attached, so that rank 0's
# runs on its worker (a future already complete runs it at once, in the caller).
attached = out / "attached"
if rank == 1:
    while not attached.exists():
        time.sleep(0.001)
tensor = torch.ones(4)
weakref.finalize(tensor, freed).atexit = False
work = dist.all_reduce(tensor, group=side, async_op=True)
future = work.get_future()
future.then(callback)
if rank == 0:
    attached.touch()
future.wait()  # returns before the callbacks run (Work.wait() after)
del work, future, tensor
if raises:
    raise RuntimeError("the script fails after its last collective")
acc.end()
(out / f"rank-{rank}.txt").write_text(f"done {len(finished)}")
if joined:
    dist.destroy_process_group()
