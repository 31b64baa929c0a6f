"""The collective steps of a distributed save, and their single-process identity.

Checkpoint collectives run on a process group of their own (gloo, created on the
first save, which every rank makes): an async save then talks in its background
thread without interleaving with the training loop's collectives.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from accel.errors import CollectiveMismatch, UsageError


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    group: Any = None
    timeout: float | None = None  # of every collective of ``group``, in seconds

    # Objects travel as JSON in uint8 tensors, never through torch's *_object
    # collectives: those unpickle what they receive (and need numpy to do it).

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (JSON-compatible) on every rank."""
        if self.world_size == 1:
            return obj
        import torch
        import torch.distributed as dist

        payload = _encode(obj) if self.rank == 0 else b""
        size = torch.tensor([len(payload)], dtype=torch.int64)
        with self._bounded():
            dist.broadcast(size, src=0, group=self.group)
            buf = _tensor(payload) if self.rank == 0 else torch.empty(int(size), dtype=torch.uint8)
            dist.broadcast(buf, src=0, group=self.group)
        return _decode(buf)

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (JSON-compatible), in rank order."""
        if self.world_size == 1:
            return [obj]
        import torch
        import torch.distributed as dist

        payload = _encode(obj)
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        with self._bounded():
            mine = torch.tensor([len(payload)], dtype=torch.int64)
            dist.all_gather(sizes, mine, group=self.group)
            longest = max(int(s) for s in sizes)
            bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world_size)]
            dist.all_gather(bufs, _tensor(payload.ljust(longest)), group=self.group)
        return [_decode(buf[: int(n)]) for buf, n in zip(bufs, sizes, strict=True)]

    @contextlib.contextmanager
    def _bounded(self) -> Iterator[None]:
        """A collective that waited ``timeout`` for its peers: one line, not gloo's."""
        try:
            yield
        except RuntimeError as exc:
            if self.timeout is None or "timed out" not in str(exc).lower():
                raise
            raise CollectiveMismatch(
                f"a checkpoint collective on rank {self.rank} waited {self.timeout:g}s for the "
                "other ranks and gave up (checkpoints.collective_timeout): a rank is stuck, "
                "died, or did not call save_state/load_state"
            ) from exc


def _encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _tensor(payload: bytes) -> Any:
    import torch

    return torch.tensor(list(payload), dtype=torch.uint8)


def _decode(buf: Any) -> Any:
    return json.loads(bytes(buf.tolist()).decode("utf-8"))


SINGLE = DistContext(rank=0, world_size=1)


def current_context(previous: DistContext | None, timeout: float | None = None) -> DistContext:
    """The context of this process; a collective the first time a group is made.

    ``timeout`` (seconds) bounds every collective of the checkpoint group: a rank that
    waits longer for its peers fails instead of hanging.
    """
    dist = sys.modules.get("torch.distributed")
    initialized = dist is not None and dist.is_available() and dist.is_initialized()
    if not initialized:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world > 1:
            raise UsageError(
                f"WORLD_SIZE is {world} but torch.distributed is not initialized; create "
                "accel.Accelerator() (or call init_process_group) before saving"
            )
        return SINGLE
    assert dist is not None
    world = dist.get_world_size()
    if world == 1:
        return SINGLE
    if previous is not None and previous.world_size == world:
        return previous
    options: dict[str, Any] = {}
    if timeout is not None:
        from datetime import timedelta

        options["timeout"] = timedelta(seconds=timeout)
    group = dist.new_group(backend="gloo", **options)
    return DistContext(rank=dist.get_rank(), world_size=world, group=group, timeout=timeout)
