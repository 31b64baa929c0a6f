"""DataLoaders sharded over the ranks: a seeded, epoch-aware DistributedSampler, so an
epoch's order depends only on the seed and the epoch and a resumed run sees the same
batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accel.errors import UsageError


def shard_loader(loader: Any, world_size: int, rank: int, seed: int) -> PreparedDataLoader:
    """A copy of ``loader`` drawing from a seeded, epoch-aware DistributedSampler."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset, RandomSampler
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
        raise UsageError(
            "prepare() shards DataLoaders over map-style datasets built with batch_size; "
            "shard iterable datasets or custom batch samplers yourself"
        )
    sampler: Any = DistributedSampler(
        loader.dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=isinstance(loader.sampler, RandomSampler),
        seed=seed,
        drop_last=loader.drop_last,
    )
    rebuilt = DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        drop_last=loader.drop_last,
        # Its own generator: creating an iterator must not draw from the global RNG,
        # or a resumed run (one iterator mid-epoch) would drift from the original.
        generator=torch.Generator(),
        **kept_options(loader),
    )
    return PreparedDataLoader(rebuilt, sampler, seed)


def kept_options(loader: Any) -> dict[str, Any]:
    """What a sharded rebuild keeps of the user's loader: its workers, collation, pinning
    and timeout (both shardings, accel's and Accelerate's, rebuild the same way)."""
    options: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
        options["persistent_workers"] = loader.persistent_workers
    return options


class PreparedDataLoader:
    """A DataLoader sharded across ranks; call :meth:`set_epoch` at each epoch's start.

    The order of an epoch depends only on the seed and the epoch, so a resumed run
    sees the same batches: :meth:`skip_batches` drops the ones a checkpoint already
    covered. Other attributes are those of the underlying DataLoader.
    """

    def __init__(self, loader: Any, sampler: Any, seed: int) -> None:
        self.loader = loader
        self.sampler = sampler
        self.seed = seed
        self.epoch = 0
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.sampler.set_epoch(self.epoch)

    def skip_batches(self, count: int) -> None:
        """Skip the first ``count`` batches of the next iteration (mid-epoch resume)."""
        self._skip = int(count)

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        # Worker seeds depend on the epoch only, like the order of the samples.
        self.loader.generator.manual_seed(self.seed * 1_000_003 + self.epoch)
        for index, batch in enumerate(self.loader):
            if index >= skip:
                yield batch

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
