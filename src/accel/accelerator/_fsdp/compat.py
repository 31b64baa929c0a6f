"""What FSDP2 on the CPU needs per supported torch release (2.6 - 2.15).

accel uses only public API for FSDP: ``torch.distributed.fsdp.fully_shard`` /
``FSDPModule``, ``torch.distributed.device_mesh.init_device_mesh``,
``torch.distributed.tensor.DTensor`` and ``torch.distributed.checkpoint.state_dict``;
their import paths and the arguments accel passes are the same in every release of the
range (2.6 is the first with a public ``fully_shard``; run on 2.6.0, 2.13.0 and 2.15.0,
and 2.11.0 by hand). Two things differ on the CPU (gloo), both fixed upstream in 2.7
(read in 2.7.1's source: ``torch/cpu/__init__.py``, ``_fsdp_collectives.py``):

==========================================  =========================  ================
                                            2.6                        2.7 - 2.15
==========================================  =========================  ================
``torch.cpu.Stream.record_event/wait_event``  absent: FSDP2's all-gather  no-ops
                                            fails (AttributeError)     (pytorch#145935)
all-gather copy-out into the unsharded       bumps the autograd version  hidden from
parameter in backward                       counter on the CPU: the     autograd
                                            re-gather after a reshard
                                            fails backward ("modified
                                            by an inplace operation")
==========================================  =========================  ================

So on 2.6 accel adds the same no-op methods to ``torch.cpu.Stream`` (a class that only
exists for device-agnostic code: a CPU has no streams) and keeps the parameters gathered
between forward and backward on the CPU (``reshard_after_forward=False``: the same
numbers, more memory). CUDA is unaffected in every release.
"""

from __future__ import annotations

import re
from typing import Any

FIXED_IN = (2, 7)


def torch_release() -> tuple[int, int]:
    import torch

    match = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(match.group(1)), int(match.group(2))) if match else FIXED_IN


def prepare_cpu_streams() -> None:
    """Give 2.6's ``torch.cpu.Stream`` the no-op event methods FSDP2 calls (2.7 has them)."""
    import torch

    stream: Any = torch.cpu.Stream
    if not hasattr(stream, "record_event"):
        stream.record_event = lambda self: None
    if not hasattr(stream, "wait_event"):
        stream.wait_event = lambda self, event: None


def reshard_after_forward(requested: bool, device_type: str) -> bool:
    """``requested``, except on the CPU under torch 2.6 (see the table above)."""
    if device_type == "cpu" and torch_release() < FIXED_IN:
        return False
    return requested
