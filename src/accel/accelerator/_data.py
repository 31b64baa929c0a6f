"""DataLoaders sharded over the ranks, resumed mid-epoch at the index level.

accel's sharding is a seeded, epoch-aware DistributedSampler: an epoch's order depends
only on the seed and the epoch. Both shardings (this one and Accelerate's,
:mod:`accel.accelerator._hfdata`) resume the same way, without loading what a checkpoint
covered:

- the batch sampler starts at the resumed batch (:class:`StartAt`): the indices before
  it are passed over, no skipped sample is read;
- torch hands batch ``i`` to worker ``i mod num_workers`` and seeds each worker from the
  iterator's base seed and its id; the resumed iterator first gives the workers before
  the resumed one an empty placeholder batch (nothing is loaded), so batch ``k`` goes to
  the worker, with the seed, that made it in the uninterrupted run;
- each worker sends its global RNG states (python, numpy, torch) with every batch
  (:class:`WorkerCollate`), so a checkpoint holds every worker's states after the last
  batch it handed out, and the resumed workers start from them (:class:`WorkerInit`);
  persistent workers carry theirs into the next epoch, and so does the checkpoint;
  with ``num_workers=0`` the samples draw from the main process's RNGs, which the
  checkpoint holds anyway.

So a resumed epoch's batches, augmentations drawn from the global RNGs in workers
included, are the uninterrupted run's bit for bit. A loader over an iterable dataset
resumes through the dataset's ``state_dict``/``load_state_dict`` (``num_workers=0``),
torchdata's ``StatefulDataLoader`` through its own ``state_dict``; a loader accel cannot
resume exactly is told so in one line at ``prepare()`` (:func:`inexact_resume`) and skips
by loading and discarding.
"""

from __future__ import annotations

import itertools
import operator
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from accel.accelerator._rng import plain_rng_state, saved_form, set_rng_state
from accel.errors import UsageError


def shard_loader(loader: Any, world_size: int, rank: int, seed: int) -> Any:
    """A copy of ``loader`` drawing from a seeded, epoch-aware DistributedSampler."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset

    if is_stateful(loader):
        return prepare_stateful(loader, world_size, rank, seed)
    if isinstance(loader.dataset, IterableDataset):
        return prepare_iterable(loader)
    if loader.batch_size is None:
        raise UsageError(
            "prepare() shards DataLoaders over map-style datasets built with batch_size; "
            "shard custom batch samplers yourself"
        )
    sampler = distributed_sampler(loader, world_size, rank, seed)
    batches = StartAt(BatchSampler(sampler, loader.batch_size, loader.drop_last), loader)
    rebuilt = DataLoader(
        loader.dataset,
        batch_sampler=batches,
        # Its own generator: creating an iterator must not draw from the global RNG,
        # or a resumed run (one iterator mid-epoch) would drift from the original.
        generator=torch.Generator(),
        **kept_options(loader),
    )
    inexact_resume(loader)
    return PreparedDataLoader(rebuilt, sampler, seed, Position(rebuilt, batches))


def distributed_sampler(loader: Any, world_size: int, rank: int, seed: int) -> Any:
    """accel's sharding of ``loader``'s dataset: seeded, epoch-aware, shuffled when the
    loader shuffles."""
    from torch.utils.data import RandomSampler
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(
        loader.dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=isinstance(loader.sampler, RandomSampler),
        seed=seed,
        drop_last=loader.drop_last,
    )


def kept_options(loader: Any, *, tagged: bool = True) -> dict[str, Any]:
    """What a sharded rebuild keeps of the user's loader: its workers (and how they
    start), collation, pinning and timeout (both shardings, accel's and Accelerate's,
    rebuild the same way). With workers and ``tagged``, collation and worker start are
    wrapped to carry the workers' RNG states."""
    options: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
        options["persistent_workers"] = loader.persistent_workers
    if loader.num_workers > 0 and tagged:
        options["collate_fn"] = WorkerCollate(loader.collate_fn)
        options["worker_init_fn"] = WorkerInit(loader.worker_init_fn)
    return options


def inexact_resume(loader: Any, stacklevel: int = 5) -> None:
    """One line at ``prepare()`` when a mid-epoch resume of ``loader`` cannot be exact."""
    from torch.utils.data import IterableDataset

    dataset = loader.dataset
    if isinstance(dataset, IterableDataset) and not is_stateful(loader):
        if not callable(getattr(dataset, "load_state_dict", None)):
            why = f"its {type(dataset).__name__} has no state_dict()/load_state_dict()"
        elif loader.num_workers > 0:
            why = "its iterable dataset's state lives in num_workers > 0 worker processes"
        else:
            return
        fix = (
            "give the dataset state_dict()/load_state_dict() and num_workers=0, or use "
            "torchdata's StatefulDataLoader"
        )
    else:
        return
    warnings.warn(
        f"prepare(): a mid-epoch resume of this DataLoader is not exact ({why}): "
        f"skip_batches() loads the batches it skips; {fix}",
        UserWarning,
        stacklevel=stacklevel,
    )


def batch_count(count: Any) -> int:
    """``skip_batches``' count: an integer from 0 (numpy's too); UsageError otherwise."""
    try:
        if isinstance(count, bool):
            raise TypeError
        value = operator.index(count)
    except TypeError:
        value = -1
    if value < 0:
        raise UsageError(
            f"the number of batches to skip must be an integer from 0, got {count!r:.40}"
        )
    return value


class StartAt:
    """A batch sampler whose next iteration starts at batch ``start``, passing over the
    indices before it; with workers, the workers before the resumed batch's own first
    get an empty placeholder (so every batch goes to the worker it went to unresumed)."""

    def __init__(self, batches: Any, loader: Any) -> None:
        self.batches = batches
        self.workers = loader.num_workers
        self.start = 0
        self.current: Callable[[], _Primable | None] = lambda: None

    def __iter__(self) -> Iterator[list[Any]]:
        iteration = _Primable(self._iterate())
        self.current = weakref.ref(iteration)  # weakly: the iteration holds this sampler
        return iteration

    def prime(self) -> None:
        """Ask the current iteration for its first batch now (see :class:`_Primable`)."""
        iteration = self.current()
        if iteration is not None:
            iteration.prime()

    def _iterate(self) -> Iterator[list[Any]]:
        # read when the first batch is asked for: torch makes an iterator it never asks
        # (its _reset makes the one it uses), and that one must not take the start
        start, self.start = self.start, 0
        for _ in range(start % self.workers if self.workers else 0):
            yield []
        yield from self._from(start)

    def _from(self, start: int) -> Iterator[list[Any]]:
        from torch.utils.data import BatchSampler

        if type(self.batches) is not BatchSampler:
            return itertools.islice(iter(self.batches), start, None)
        # A plain BatchSampler: pass over start * batch_size indices at C speed
        size, drop_last = self.batches.batch_size, self.batches.drop_last
        indices = itertools.islice(iter(self.batches.sampler), start * size, None)
        return _batched(indices, size, drop_last)

    def __len__(self) -> int:
        return len(self.batches)

    def __getattr__(self, name: str) -> Any:
        if name == "batches":
            raise AttributeError(name)
        return getattr(self.batches, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # what is not its own goes to the batch sampler (join_uneven_inputs' even_batches)
        if name in ("batches", "workers", "start", "current"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.batches, name, value)


class _Primable:
    """An iteration of :class:`StartAt` whose first batch can be asked for early
    (:meth:`prime`). A sampler that shuffles from the global RNG (``torch.randperm`` in
    its ``__iter__``) draws when its first index is asked for: in one process, after the
    DataLoader's iterator is made. A loader resumed mid-epoch makes that iterator with
    the epoch's RNG restored, and primes it there, so the shuffle is the saved epoch's."""

    def __init__(self, items: Iterator[list[Any]]) -> None:
        self.items = items
        self.first: list[list[Any]] = []
        self.asked = False

    def prime(self) -> None:
        if not self.asked:  # workers asked already, as the iterator was made
            self.asked = True
            self.first.extend(itertools.islice(self.items, 1))

    def __iter__(self) -> _Primable:
        return self

    def __next__(self) -> list[Any]:
        self.asked = True
        if self.first:
            return self.first.pop()
        return next(self.items)


def _batched(indices: Iterator[Any], size: int, drop_last: bool) -> Iterator[list[Any]]:
    while batch := list(itertools.islice(indices, size)):
        if len(batch) < size and drop_last:
            return
        yield batch


class Tagged:
    """A batch from a worker, with the worker's id and its RNG states after making it
    (``batch`` is None for a placeholder)."""

    __slots__ = ("batch", "rng", "worker")

    def __init__(self, batch: Any, worker: int, rng: Any) -> None:
        self.batch, self.worker, self.rng = batch, worker, rng

    def pin_memory(self, device: Any = None) -> Tagged:
        from torch.utils.data._utils.pin_memory import pin_memory

        return Tagged(pin_memory(self.batch, device), self.worker, self.rng)  # type: ignore[no-untyped-call]


class WorkerCollate:
    """The loader's collate_fn, run in a worker: the batch, tagged with the worker's RNG
    states; a placeholder (no samples) passes through untouched."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, samples: Any) -> Any:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is None:
            return self.collate(samples)
        if isinstance(samples, list) and not samples:
            return Tagged(None, info.id, None)
        return Tagged(self.collate(samples), info.id, plain_rng_state())


class WorkerInit:
    """The loader's worker_init_fn, then the RNG states a checkpoint saved for this
    worker (``states``, set for the one iterator a resume makes)."""

    def __init__(self, init: Any) -> None:
        self.init = init
        self.states: dict[int, Any] = {}

    def __call__(self, worker_id: int) -> None:
        if self.init is not None:
            self.init(worker_id)
        state = self.states.get(worker_id)
        if state is not None:
            set_rng_state(state)


class Position:
    """Where a prepared loader stands in its epoch: the batches handed out (skipped ones
    included) and each worker's RNG states after its last one; and a checkpoint's, for
    the next iteration."""

    def __init__(self, loader: Any, batches: StartAt) -> None:
        self.loader, self.batches = loader, batches
        self.handed = 0
        self.workers: dict[int, Any] = {}
        self._saved: dict[str, Any] | None = None

    def begin(self, skip: int) -> None:
        """Before the epoch's iterator is made: start it at batch ``skip``."""
        saved, self._saved = self._saved, None
        self.handed = skip
        self.batches.start = skip
        persistent = self.loader.persistent_workers
        if not persistent:
            self.workers = {}  # new workers, freshly seeded
        init = self.loader.worker_init_fn
        if not isinstance(init, WorkerInit) or saved is None:
            return
        at = int(saved.get("position", -1))
        # persistent workers carry their RNG states into the next epoch
        if at == skip or (persistent and skip == 0 and at == len(self.loader)):
            states = {w: s for w, s in enumerate(saved.get("workers") or []) if s is not None}
            init.states = states
            self.workers = dict(states) if persistent else {}
        elif skip and saved.get("workers"):
            warnings.warn(
                f"skip_batches({skip}) but the checkpoint stopped this loader at batch "
                f"{saved.get('position')}: its workers start with fresh RNG states",
                UserWarning,
                stacklevel=3,
            )

    def started(self) -> None:
        """The iterator is made: its workers hold their copy of the states."""
        init = self.loader.worker_init_fn
        if isinstance(init, WorkerInit):
            init.states = {}

    def unwrap(self, item: Any) -> tuple[Any, Any]:
        """(batch, what handing it out records); batch is :data:`PLACEHOLDER` for a
        worker's placeholder."""
        if not isinstance(item, Tagged):
            return item, None
        return (PLACEHOLDER if item.rng is None else item.batch), item

    def hand_out(self, tag: Any) -> None:
        self.handed += 1
        if tag is not None:
            self.workers[tag.worker] = tag.rng

    def state_dict(self, *, ended: bool = False) -> dict[str, Any]:
        """The batches handed out and each worker's RNG states after its last one;
        ``ended``: the next epoch's start (where only persistent workers carry states)."""
        kept = self.workers if not ended or self.loader.persistent_workers else {}
        workers: list[Any] = [None] * (max(kept, default=-1) + 1)
        for worker, state in kept.items():
            # a restored state is kept as the checkpoint held it until replaced
            workers[worker] = saved_form(state) if isinstance(state, tuple) else state
        return {"position": 0 if ended else self.handed, "workers": workers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._saved = state if "position" in state else None

    def batches_of(self, iterator: Iterable[Any]) -> Iterator[Any]:
        """The batches of ``iterator`` (an iteration of the loader), recorded as handed out."""
        for item in iterator:
            batch, tag = self.unwrap(item)
            if batch is PLACEHOLDER:
                continue
            self.hand_out(tag)
            yield batch


PLACEHOLDER: Any = object()


class Wrapping:
    """A prepared loader's length and the attributes it does not have itself are those
    of the DataLoader it wraps (``loader``)."""

    loader: Any

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


class PreparedDataLoader(Wrapping):
    """A DataLoader sharded across ranks; call :meth:`set_epoch` at each epoch's start.

    The order of an epoch depends only on the seed and the epoch, so a resumed run
    sees the same batches: :meth:`skip_batches` starts the next iteration after the ones
    a checkpoint covered, without loading them. Other attributes are those of the
    underlying DataLoader.
    """

    def __init__(self, loader: Any, sampler: Any, seed: int, position: Position) -> None:
        self.loader = loader
        self.sampler = sampler
        self.seed = seed
        self.epoch = 0
        self.position = position
        self._skip = 0

    @property
    def batch_size(self) -> int:
        return int(self.loader.batch_sampler.batch_size)

    @property
    def drop_last(self) -> bool:
        return bool(self.loader.batch_sampler.drop_last)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.sampler.set_epoch(self.epoch)

    def skip_batches(self, count: int) -> None:
        """Start the next iteration at batch ``count`` (mid-epoch resume)."""
        self._skip = batch_count(count)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, **self.position.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_epoch(int(state["epoch"]))
        self.position.load_state_dict(state)

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip = self._skip, 0
        self.position.begin(skip)
        # Worker seeds depend on the epoch only, like the order of the samples;
        # persistent workers are seeded once, as at epoch 0, wherever the run starts.
        persistent = self.loader.persistent_workers
        self.loader.generator.manual_seed(self.seed * 1_000_003 + (0 if persistent else self.epoch))
        iterator = iter(self.loader)
        self.position.started()
        yield from self.position.batches_of(iterator)


def prepare_iterable(loader: Any) -> IterableLoader:
    """A loader over an iterable dataset, which shards itself: kept as it is, resumed
    through the dataset's ``state_dict``/``load_state_dict`` where it has them."""
    inexact_resume(loader, stacklevel=6)
    resumable = callable(getattr(loader.dataset, "load_state_dict", None))
    return IterableLoader(loader, resumable and loader.num_workers == 0)


def is_stateful(loader: Any) -> bool:
    """Whether ``loader`` is torchdata's StatefulDataLoader (without importing torchdata)."""
    return any(
        cls.__name__ == "StatefulDataLoader" and cls.__module__.startswith("torchdata.")
        for cls in type(loader).__mro__
    )


def prepare_stateful(loader: Any, world_size: int, rank: int, seed: int) -> IterableLoader:
    """torchdata's StatefulDataLoader, resumed through its own ``state_dict``; over ranks
    a map-style dataset is sharded by accel's seeded DistributedSampler."""
    from torch.utils.data import IterableDataset

    if world_size == 1 or isinstance(loader.dataset, IterableDataset):
        return IterableLoader(loader, True, stateful=True)
    if loader.batch_size is None:
        raise UsageError(
            "prepare() shards a StatefulDataLoader built with batch_size; shard custom "
            "batch samplers yourself"
        )
    sampler = distributed_sampler(loader, world_size, rank, seed)
    options = kept_options(loader, tagged=False)
    rebuilt = type(loader)(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        drop_last=loader.drop_last,
        **options,
    )
    return IterableLoader(rebuilt, True, stateful=True, sampler=sampler)


class IterableLoader(Wrapping):
    """A prepared loader that resumes through a ``state_dict``: the iterable dataset's
    (``num_workers=0``) or torchdata's StatefulDataLoader's. After ``load_state`` the next
    iteration goes on where the checkpoint stopped, and ``skip_batches`` has nothing
    left to skip; without a restored state (or a resumable source), it loads and drops."""

    def __init__(
        self, loader: Any, resumable: bool, *, stateful: bool = False, sampler: Any = None
    ) -> None:
        import torch

        self.loader, self.resumable, self.stateful = loader, resumable, stateful
        self.sampler = sampler
        self.epoch = 0
        self._skip = 0
        self._restored = False
        # Making an iterator draws the workers' base seed: from a generator of the
        # loader's own, not the global RNG, which a resumed run would draw from twice.
        self._owns_generator = loader.generator is None
        if self._owns_generator:
            loader.generator = torch.Generator()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        for each in (self.sampler, self.loader.dataset):
            set_epoch = getattr(each, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)

    def skip_batches(self, count: int) -> None:
        """Skip ``count`` batches, unless a restored state already starts after them."""
        self._skip = 0 if self._restored else batch_count(count)

    def _source(self) -> Any:
        return self.loader if self.stateful else self.loader.dataset

    def state_dict(self) -> dict[str, Any]:
        state = self._source().state_dict() if self.resumable else None
        return {"epoch": self.epoch, "source": state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_epoch(int(state["epoch"]))
        if self.resumable and state.get("source") is not None:
            self._source().load_state_dict(state["source"])
            self._restored = True

    def __iter__(self) -> Iterator[Any]:
        skip, self._skip, self._restored = self._skip, 0, False
        if self._owns_generator:
            self.loader.generator.manual_seed(1_000_003 + self.epoch)
        for index, batch in enumerate(self.loader):
            if index >= skip:
                yield batch
