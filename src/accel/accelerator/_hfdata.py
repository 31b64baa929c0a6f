"""Hugging Face Accelerate's data sharding, for scripts ported from it.

Accelerate gives each rank whole batches in turn: with 2 ranks and batches
``[0..3], [4..7], ...`` rank 0 takes ``[0..3]`` and rank 1 ``[4..7]``
(``accelerate.data_loader.BatchSamplerShard``); ``split_batches`` instead cuts every
batch into one slice per rank. With ``even_batches`` (the default) the ranks that run
short at the end are topped up from the first samples, so all ranks see as many
batches; ``remainder`` says how many of the last global batch were real, so
``gather_for_metrics`` can drop the rest. A shuffled loader's sampler gets a generator
seeded from the global torch RNG at ``prepare()`` (one draw, as Accelerate makes), and
every epoch starts from rank 0's generator state, so all ranks shuffle alike.

Unlike Accelerate's loader, an epoch's order can be replayed: the generator's state at
the start of the epoch is kept and goes into ``save_state``, so a run resumed mid-epoch
(``skip_batches`` / ``skip_first_batches``) sees the same batches as the run that saved,
started at the index level as accel's own loaders are (:mod:`accel.accelerator._data`):
nothing skipped is loaded, and the workers' RNG states are the saved run's.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from accel.accelerator._accumulate import GradientState
from accel.accelerator._data import (
    PLACEHOLDER,
    Position,
    StartAt,
    Wrapping,
    batch_count,
    inexact_resume,
    kept_options,
    prepare_iterable,
)
from accel.accelerator._rng import plain_rng_state, rng_state, saved_form, set_rng_state
from accel.errors import UsageError


@dataclass
class HfData:
    """How Accelerate would shard: its ``DataLoaderConfiguration`` and ``rng_types``."""

    world_size: int
    rank: int
    split_batches: bool = False
    even_batches: bool = True
    seedable: bool = False
    data_seed: int | None = None
    rng_types: tuple[str, ...] = ("generator",)
    device: Any = None  # batches go there (``device_placement``); None: left where they are
    non_blocking: bool = False


class BatchShard:
    """``accelerate.data_loader.BatchSamplerShard``: this rank's batches of a batch sampler."""

    def __init__(self, batches: Any, data: HfData) -> None:
        self.batch_sampler = batches
        self.num_processes, self.process_index = data.world_size, data.rank
        self.split_batches, self.even_batches = data.split_batches, data.even_batches
        self.batch_size = getattr(batches, "batch_size", None)
        self.drop_last = getattr(batches, "drop_last", False)
        if self.split_batches and (self.batch_size is None or self.batch_size % self.num_processes):
            raise UsageError(
                f"split_batches needs a batch size ({self.batch_size}) that is a multiple of "
                f"the number of processes ({self.num_processes})"
            )

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    def __len__(self) -> int:
        total, n = len(self.batch_sampler), self.num_processes
        if self.split_batches or total % n == 0:
            return total if self.split_batches else total // n
        if self.drop_last:
            return total // n
        if self.even_batches or self.process_index < total % n:
            return total // n + 1
        return total // n

    def __iter__(self) -> Iterator[list[int]]:
        return self._split() if self.split_batches else self._whole()

    def _split(self) -> Iterator[list[int]]:
        first: list[int] = []
        batch: list[int] = []
        width = self.batch_size // self.num_processes  # type: ignore[operator]
        lo, hi = width * self.process_index, width * (self.process_index + 1)
        for index, batch in enumerate(self.batch_sampler):
            if index == 0:
                first = list(batch)
            if len(batch) == self.batch_size:
                yield batch[lo:hi]
        if self.drop_last or not first or len(batch) >= self.batch_size:  # type: ignore[operator]
            return
        if not self.even_batches:
            if len(batch) > lo:
                yield batch[lo:hi]
            return
        while len(first) < self.batch_size:  # type: ignore[operator]
            first += first
        yield (list(batch) + first)[lo:hi]

    def _whole(self) -> Iterator[list[int]]:
        n, me, size = self.num_processes, self.process_index, self.batch_size
        first: list[Any] = []
        mine: list[int] | None = None
        index, batch = -1, list[int]()
        for index, batch in enumerate(self.batch_sampler):
            if not self.drop_last and index < n:
                first.extend([batch] if size is None else batch)
            if index % n == me:
                mine = batch
            if index % n == n - 1 and (size is None or len(batch) == size):
                yield mine  # type: ignore[misc]
                mine = None
        if self.drop_last or not first:
            return
        if not self.even_batches:
            if mine:
                yield mine
            return
        yield from self._top_up(first, mine, index, list(batch))

    def _top_up(
        self, first: list[Any], mine: list[int] | None, index: int, batch: list[int]
    ) -> Iterator[list[int]]:
        """The last round, completed from the first samples so every rank has a batch."""
        n, me, size = self.num_processes, self.process_index, self.batch_size
        if mine and (size is None or len(mine) == size):
            yield mine
        needed = n * size if size is not None else n
        while len(first) < needed:
            first += first
        if size is None or len(batch) == size:
            batch = []
            index += 1
        cycle = 0
        while index % n != 0 or batch:
            if size is None:
                batch = first[cycle]
                cycle += 1
            else:
                end = cycle + size - len(batch)
                batch = batch + first[cycle:end]
                cycle = end
            if index % n == me:
                yield batch
            batch = []
            index += 1


def shard_hf(loader: Any, data: HfData, state: GradientState) -> HfLoader:
    """``loader`` sharded as ``accelerate.data_loader.prepare_data_loader`` would."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

    if isinstance(loader.dataset, IterableDataset):
        return prepare_iterable(loader)  # type: ignore[return-value]
    batches = loader.sampler if isinstance(loader.sampler, BatchSampler) else loader.batch_sampler
    sampler: Any = getattr(batches, "sampler", None)
    generator = None
    if isinstance(sampler, RandomSampler) and data.seedable:
        seed = data.data_seed if data.data_seed is not None else torch.random.initial_seed()
        sampler.generator = sampler.generator or torch.Generator()
        generator, sampler = sampler.generator, _Seedable(sampler, seed)
        batches.sampler = sampler
    elif data.world_size > 1 and hasattr(sampler, "generator"):
        if sampler.generator is None:  # the one draw from the global RNG Accelerate makes
            sampler.generator = torch.Generator()
            sampler.generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        generator = sampler.generator
    drawing = None
    if generator is None and isinstance(sampler, RandomSampler) and sampler.generator is None:
        drawing = batches.sampler = _Drawing(sampler)
    if data.world_size > 1:
        batches = BatchShard(batches, data)
    starting = StartAt(batches, loader)
    rebuilt = DataLoader(
        loader.dataset,
        batch_sampler=starting,
        generator=loader.generator,
        **kept_options(loader),
    )
    inexact_resume(loader)
    hf = HfLoader(rebuilt, data, state, generator, loader.drop_last)
    hf.position = Position(rebuilt, starting)
    if drawing is not None:
        drawing.owner = weakref.ref(hf)
        hf.draws_from = drawing
    return hf


class _Drawing:
    """A shuffling sampler without a generator, as torch runs it: at each epoch it seeds
    a generator with one draw from the global RNG, when the epoch's first index is
    asked for (after the DataLoader's own draw). Here the loader makes that draw, so
    it knows the epoch's generator (and a resumed run replays it without a draw).

    Its loader is held weakly: torch's iterator holds the sampler, the loader holds the
    iterator, and that cycle left both to the cycle collector, which runs the index
    queues' finalizers before the iterator's: each worker then waited out its 5 s join."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.owner: Callable[[], Any] = lambda: None

    def __iter__(self) -> Iterator[int]:
        owner = self.owner()
        if owner is None:  # its loader is gone: the DataLoader's own shuffle
            yield from self.inner
            return
        generator = owner._epoch_generator()
        owner.generator = self.inner.generator = generator
        owner._epoch_start = generator.get_state()
        del owner
        try:
            yield from self.inner
        finally:
            self.inner.generator = None

    def __len__(self) -> int:
        return len(self.inner)


class _Seedable:
    """``accelerate.data_loader.SeedableRandomSampler``: the order of epoch ``e`` is
    the permutation of seed ``data_seed + e``."""

    def __init__(self, sampler: Any, seed: int) -> None:
        self.inner, self.initial_seed, self.epoch = sampler, int(seed), 0

    def __iter__(self) -> Iterator[int]:
        self.inner.generator.manual_seed(self.initial_seed + self.epoch)
        yield from self.inner
        self.epoch += 1

    def __len__(self) -> int:
        return len(self.inner)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)


class HfLoader(Wrapping):
    """A prepared loader with Accelerate's sharding (``DataLoaderShard``'s behaviour).

    ``end_of_dataloader`` is True while the last batch is out (one batch is read ahead,
    as Accelerate does), which ends a gradient-accumulation cycle. ``set_epoch``,
    ``skip_batches`` and ``epoch`` are accel's resume helpers, as on accel's own loaders.
    """

    def __init__(
        self, loader: Any, data: HfData, state: GradientState, generator: Any, drop_last: bool
    ) -> None:
        self.loader, self.data, self.state = loader, data, state
        self.generator = generator
        self.epoch = 0
        self.end_of_dataloader = False
        self.remainder = -1
        self._drop_last = drop_last
        self._skip = 0
        self._epoch_start: Any = None  # the generator's state when this epoch began
        self._restored: Any = None  # a checkpoint's epoch-start state, for the next epoch
        self._in_epoch = False
        self._epoch_rng: Any = None  # the global torch RNG as this epoch began
        self._resume_rng: Any = None  # the same, from a checkpoint taken mid-epoch
        #: a shuffling sampler without a generator: it seeds one from the global RNG at
        #: each epoch (torch's RandomSampler); the loader makes that draw itself, the
        #: same draw, so the epoch's generator is known and a resume replays it
        self.draws_from: Any = None
        self.position: Any = None  # where the epoch stands (set by shard_hf)
        #: without workers, samples draw from this process's RNGs, and the batch read
        #: ahead drew before the one handed out was trained on: the RNGs' states before
        #: that read go into a checkpoint, and a resume reads that batch from them
        self._ahead: Any = None
        self._resume_ahead: Any = None
        self._drawn = False  # the saved run's persistent workers had their base seed
        #: ... drawn before the saved epoch began (not at its start): the resumed run's
        #: new workers' base seed must then come from no draw of the global RNG
        self._no_base_draw = False
        self._workers_up = False  # persistent workers, started by this process
        self._fresh = True  # this epoch's iterator drew its workers' base seed

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all ranks; None for a batch sampler without a size."""
        size = getattr(self.loader.batch_sampler, "batch_size", None)
        if not isinstance(size, int):
            return None
        return size if self.data.split_batches else size * self.data.world_size

    @property
    def total_dataset_length(self) -> int:
        return len(self.loader.dataset)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        sampler = getattr(self.loader.batch_sampler, "sampler", None)
        inner = getattr(getattr(self.loader.batch_sampler, "batch_sampler", None), "sampler", None)
        for each in (sampler, inner):
            set_epoch = getattr(each, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)

    def skip_batches(self, count: int) -> None:
        """Skip the first ``count`` batches of the next iteration (mid-epoch resume)."""
        self._skip = batch_count(count)

    def state_dict(self) -> dict[str, Any]:
        """The epoch; mid-epoch, the generator's and the global RNG's states at its start
        (they replay the epoch's order and the draws its start made), the batches handed
        out and the workers' RNG states after them."""
        if self._in_epoch and self.end_of_dataloader:
            # the last batch is out: nothing of this epoch is left to draw, and a resumed
            # run goes on with the next one, as this run does once the batch is done
            after = None if self.draws_from is not None else self._generator_state()
            where = self.position.state_dict(ended=True)
            return {"epoch": self.epoch + 1, "generator": after, "torch_rng": None, **where}
        start = self._epoch_start if self._epoch_start is not None else self._generator_state()
        torch_rng = self._epoch_rng if self._in_epoch else None
        where = self.position.state_dict() if self._in_epoch else {}
        if self._in_epoch and self._ahead is not None:
            where["ahead_rng"] = saved_form(self._ahead)
        if self._in_epoch and self.loader.persistent_workers:
            where["fresh_workers"] = self._fresh
        return {"epoch": self.epoch, "generator": start, "torch_rng": torch_rng, **where}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_epoch(int(state["epoch"]))
        self.position.load_state_dict(state)
        self._resume_ahead = state.get("ahead_rng")
        # the saved run's persistent workers were started already: their base seed is
        # no draw of this epoch's, in the resumed run it must not be one either
        self._drawn = bool(self.loader.persistent_workers and "position" in state)
        self._no_base_draw = self._drawn and state.get("fresh_workers") is False
        self._resume_rng = state.get("torch_rng")
        saved, self._epoch_start, self._restored = state.get("generator"), None, None
        if saved is None:
            return
        if self.draws_from is not None:
            self._restored = saved  # this epoch's generator: no new draw from the global RNG
        elif self.generator is not None:
            self.generator.set_state(saved)

    def _generator_state(self) -> Any:
        return None if self.generator is None else self.generator.get_state()

    def __iter__(self) -> Iterator[Any]:
        import torch

        resumed, self._resume_rng = self._resume_rng, None
        self._synchronize(resumed=resumed is not None)
        self._epoch_start = None if self.draws_from is not None else self._generator_state()
        self._in_epoch = True
        self._epoch_rng = resumed if resumed is not None else torch.get_rng_state()
        skip, self._skip = self._skip, 0
        self._begin()
        self.set_epoch(self.epoch)
        try:
            yield from self._batches(skip, resumed)
        finally:
            self.state.active.remove(self)
        self._in_epoch = False
        self.epoch += 1
        self._epoch_start = None  # the next epoch starts from the generator as it is now
        if self.draws_from is not None:
            self.generator = None

    def _epoch_generator(self) -> Any:
        """The generator torch's RandomSampler would seed for this epoch (or the one a
        checkpoint restored)."""
        import torch

        generator = torch.Generator()
        if self._restored is not None:
            generator.set_state(self._restored)
            self._restored = None
        else:
            generator.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        return generator

    def _batches(self, skip: int, resumed: Any) -> Iterator[Any]:
        ahead, self._resume_ahead, self._ahead = self._resume_ahead, None, None
        items = self._start(resumed, skip)
        try:
            current, tag = self._first(items, ahead if skip else None)
        except StopIteration:
            return
        in_process = self.loader.num_workers == 0
        while True:
            current = self._place(current)
            try:
                self._ahead = plain_rng_state() if in_process else None
                upcoming = self._next(items)
            except StopIteration:
                self.end_of_dataloader = True
                self.position.hand_out(tag)
                yield current
                return
            self.position.hand_out(tag)
            yield current
            current, tag = upcoming

    def _first(self, items: Iterator[Any], ahead: Any) -> tuple[Any, Any]:
        """The first batch; resumed, read from the RNG states the saved run read it
        from, the restored ones then put back."""
        if ahead is None:
            return self._next(items)
        now = rng_state()
        set_rng_state(ahead)
        try:
            return self._next(items)
        finally:
            set_rng_state(now)

    def _next(self, items: Iterator[Any]) -> tuple[Any, Any]:
        """The next batch (one read ahead of the one handed out) and its worker's tag."""
        while True:
            batch, tag = self.position.unwrap(next(items))
            if batch is not PLACEHOLDER:
                return batch, tag

    def _start(self, resumed: Any, skip: int) -> Iterator[Any]:
        """The DataLoader's iterator, from batch ``skip``. Making one draws from the global
        RNG (the workers' base seed): resumed mid-epoch, that draw is the one the epoch's
        start made, from the RNG as it was then; the RNG a checkpoint restored is then
        put back."""
        self.position.begin(skip)
        drawn, self._drawn = self._drawn, False
        no_base_draw, self._no_base_draw = self._no_base_draw, False
        self._fresh = not (self.loader.persistent_workers and self._workers_up)
        self._workers_up = True
        if resumed is None and not drawn:
            return self._started(iter(self.loader))
        import torch

        if resumed is None and self.draws_from is not None and self._restored is None:
            # the epoch's shuffle is a draw the saved run made too: make it before the
            # base seed's, which is undone below
            self._restored = self._epoch_generator().get_state()
        now = torch.get_rng_state()
        torch.set_rng_state(now if resumed is None else resumed)
        own = self.loader.generator
        if no_base_draw:  # the saved epoch drew no base seed: the RNG is all the sampler's
            self.loader.generator = torch.Generator()
        try:
            iterator = self._started(iter(self.loader))
            # a sampler shuffling from the global RNG draws at its first index: from the
            # epoch's RNG too, as in the saved run (a plain RandomSampler is _Drawing's)
            self.position.batches.prime()
            return iterator
        finally:
            self.loader.generator = own
            torch.set_rng_state(now)

    def _started(self, iterator: Iterator[Any]) -> Iterator[Any]:
        self.position.started()
        return iterator

    def _begin(self) -> None:
        self.end_of_dataloader = False
        self.remainder = -1
        total = self.total_batch_size
        if not self._drop_last and total:  # unknown (a custom batch sampler): -1, as there
            self.remainder = self.total_dataset_length % total
        self.state.active.append(self)

    def _synchronize(self, *, resumed: bool) -> None:
        """Every rank starts the epoch with rank 0's RNG states (Accelerate's rng_types);
        resumed mid-epoch, the global RNGs are each rank's own from the checkpoint."""
        from accel.accelerator import _ops as ops

        if self.data.world_size == 1:
            return
        import torch

        for kind in self.data.rng_types:
            if kind == "generator" and self.generator is not None:
                state = ops.broadcast(self.generator.get_state())
                self.generator.set_state(state)
            elif resumed:
                continue
            elif kind == "torch":
                torch.set_rng_state(ops.broadcast(torch.get_rng_state()))
            elif kind == "cuda" and torch.cuda.is_available():
                device = torch.device("cuda", torch.cuda.current_device())
                state = ops.broadcast(torch.cuda.get_rng_state().to(device)).cpu()
                torch.cuda.set_rng_state(state)

    def _place(self, batch: Any) -> Any:
        if self.data.device is None:
            return batch
        return _to_device(batch, self.data.device, self.data.non_blocking)


def _to_device(data: Any, device: Any, non_blocking: bool) -> Any:
    if hasattr(data, "to") and not isinstance(data, type):
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:
            return data.to(device)
    if isinstance(data, (list, tuple)):
        items = [_to_device(d, device, non_blocking) for d in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    if isinstance(data, dict):
        return type(data)({k: _to_device(v, device, non_blocking) for k, v in data.items()})
    return data


def skip_first(loader: Any, count: int) -> Any:
    """Accelerate's ``skip_first_batches``: a loader that starts at batch ``count`` each
    time it is iterated, ``count`` shorter (``len``), as Accelerate's ``SkipDataLoader``.
    A prepared loader also skips in place, at its own next iteration (accel's
    ``skip_batches``), without loading the batches skipped."""
    count = batch_count(count)
    if isinstance(loader, HfLoader) or hasattr(loader, "skip_batches"):
        loader.skip_batches(count)
        return _SkippingPrepared(loader, count)
    return _Skipping(loader, count)


class _Skipping(Wrapping):
    def __init__(self, loader: Any, count: int) -> None:
        self.loader, self.count = loader, int(count)

    def __iter__(self) -> Iterator[Any]:
        for index, batch in enumerate(self.loader):
            if index >= self.count:
                yield batch

    def __len__(self) -> int:
        return max(len(self.loader) - self.count, 0)


class _SkippingPrepared(_Skipping):
    def __iter__(self) -> Iterator[Any]:
        self.loader.skip_batches(self.count)  # the prepared loader's own, loading none
        return iter(self.loader)
