"""A prepared loader resumed mid-epoch: index-level, bit for bit, nothing skipped loaded.

Every run here is two epochs of a shuffled loader whose samples draw random
augmentations from the global RNGs (python, numpy, torch) where they are loaded: in the
main process (``num_workers=0``) or in two workers. A run stopped with ``save_state`` at
some step and resumed with ``load_state`` + ``skip_batches`` must hand out the same
tensors as the run that never stopped, and load only the samples it hands out.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

import accel
from accel.accelerator._accumulate import GradientState
from accel.accelerator._data import shard_loader
from accel.accelerator._hfdata import HfData, shard_hf

LOADS = multiprocessing.get_context("fork").Value("i", 0)  # shared with forked workers


class Augmented(Dataset[torch.Tensor]):
    """Sample ``i``: ``i`` plus noise drawn from all three global RNGs; counts its loads."""

    def __init__(self, size: int = 20) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        with LOADS.get_lock():
            LOADS.value += 1
        noise = torch.rand(2) + random.random() + float(np.random.rand())
        return torch.cat([torch.tensor([float(index)]), noise])


class Counting(IterableDataset[torch.Tensor]):
    """0, 1, 2, ... with its position as its state (``stateful``), counting its reads."""

    def __init__(self, size: int = 20, stateful: bool = True) -> None:
        self.size, self.next = size, 0
        if stateful:
            self.state_dict = lambda: {"next": self.next}
            self.load_state_dict = lambda state: setattr(self, "next", int(state["next"]))

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Any:
        while self.next < self.size:
            with LOADS.get_lock():
                LOADS.value += 1
            self.next += 1
            yield torch.tensor([float(self.next - 1), torch.rand(()).item()])
        self.next = 0


class GlobalShuffle(Sampler[int]):
    """A sampler of a script's own that shuffles from the global RNG, as torch's
    RandomSampler without a generator does: it draws when its first index is asked for."""

    def __init__(self, size: int = 20) -> None:
        self.size = size

    def __iter__(self) -> Iterator[int]:
        yield from torch.randperm(self.size).tolist()

    def __len__(self) -> int:
        return self.size


class GlobalBatches(Sampler[list[int]]):
    """A batch sampler of a script's own, shuffling from the global RNG, batches of 3."""

    def __init__(self, size: int = 20) -> None:
        self.size = size

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(self.size).tolist()
        yield from (order[i : i + 3] for i in range(0, self.size, 3))

    def __len__(self) -> int:
        return (self.size + 2) // 3


def _loader(workers: int, dataset: Any = None, **options: Any) -> DataLoader[Any]:
    if workers:
        options.setdefault("multiprocessing_context", "fork")
    data = Augmented() if dataset is None else dataset
    shuffle = not isinstance(data, IterableDataset) and options.pop("shuffle", True)
    if "sampler" in options or "batch_sampler" in options:
        shuffle = False  # the sampler's own
    size = None if "batch_sampler" in options else 3
    return DataLoader(data, batch_size=size or 1, shuffle=shuffle, num_workers=workers, **options)


def _run(
    make: Any,
    workers: int | str,
    *,
    stop: int = 0,
    resume: bool = False,
    dataset: Any = None,
    **options: Any,
) -> list[torch.Tensor]:
    """Two epochs, as a script runs them: stop (save) at step ``stop``, or resume."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    acc = make()
    persistent = workers == "2-persistent"
    if persistent:
        options["persistent_workers"] = True
    loader = acc.prepare(_loader(2 if persistent else int(workers), dataset, **options))
    step = (acc.load_state() or 0) if resume else 0
    LOADS.value = 0
    seen: list[torch.Tensor] = []
    while step < 2 * len(loader):
        epoch, done = divmod(step, len(loader))
        loader.set_epoch(epoch)
        loader.skip_batches(done)
        for batch in loader:
            seen.append(batch)
            step += 1
            torch.rand(1)  # the training step draws too
            if step == stop:
                acc.save_state(step)
                return seen
    return seen


#: Workers are processes: the runs with workers are slow tests, with a timeout.
SLOW = [pytest.mark.slow, pytest.mark.timeout(180)]
WORKERS = [0, pytest.param(2, marks=SLOW), pytest.param("2-persistent", marks=SLOW)]

SHARDINGS = {"accel": lambda: accel.Accelerator(seed=5), "hf": lambda: accel.Accelerator()}


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("sharding", list(SHARDINGS))
@pytest.mark.parametrize("stop", [1, 4, 7, 9], ids=["first", "mid", "epoch-end", "second"])
def test_a_resumed_run_hands_out_the_uninterrupted_runs_batches_bit_for_bit(
    project: Path, sharding: str, workers: int | str, stop: int
) -> None:
    make = SHARDINGS[sharding]
    whole = _run(make, workers)
    first = _run(make, workers, stop=stop)
    rest = _run(make, workers, resume=True)
    assert len(first) + len(rest) == len(whole) == 14
    assert all(torch.equal(a, b) for a, b in zip(first + rest, whole, strict=True))
    # only what the resumed run hands out is loaded: nothing it skipped
    assert LOADS.value == sum(len(b) for b in rest)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("sampling", ["sampler", "batch_sampler"])
@pytest.mark.parametrize("stop", [1, 4, 9], ids=["first", "mid", "second"])
def test_a_sampler_of_ones_own_shuffling_from_the_global_rng_resumes_bit_for_bit(
    project: Path, sampling: str, workers: int | str, stop: int
) -> None:
    # Accelerate's sharding (a ported script's): the epoch's RNG was restored only around
    # making the iterator, and such a sampler draws later, at its first index, so the
    # rest of the resumed epoch came from another permutation (samples repeated, others
    # never seen) with no word
    make = SHARDINGS["hf"]

    def sampled(**run: Any) -> list[torch.Tensor]:
        kind = GlobalShuffle if sampling == "sampler" else GlobalBatches
        return _run(make, workers, **run, **{sampling: kind()})

    whole = sampled()
    first = sampled(stop=stop)
    rest = sampled(resume=True)
    assert len(first) + len(rest) == len(whole) == 14
    assert all(torch.equal(a, b) for a, b in zip(first + rest, whole, strict=True))


def test_no_skipped_sample_is_loaded(project: Path) -> None:
    loader = accel.Accelerator(seed=1).prepare(_loader(0, Augmented(3000)))
    loader.skip_batches(990)
    LOADS.value = 0
    batch = next(iter(loader))
    assert LOADS.value == 3 and len(batch) == 3


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_accels_sharding_over_two_ranks_resumes_each_rank_at_the_index_level() -> None:
    for rank in (0, 1):
        whole = shard_loader(_loader(2), 2, rank, seed=3)
        whole.set_epoch(1)
        expected = list(whole)
        resumed = shard_loader(_loader(2), 2, rank, seed=3)
        resumed.set_epoch(1)
        stopped = iter(resumed)
        head = [next(stopped) for _ in range(2)]
        state = resumed.state_dict()
        # The stopped iterator's workers prefetch on: ended first, or they count loads
        # of theirs after the reset (CI67: 6 loads for a tail of 4 samples).
        del stopped, resumed
        gc.collect()
        again = shard_loader(_loader(2), 2, rank, seed=3)
        again.load_state_dict(state)
        again.skip_batches(2)
        LOADS.value = 0
        tail = list(again)
        assert LOADS.value == sum(len(b) for b in tail)
        assert all(torch.equal(a, b) for a, b in zip(head + tail, expected, strict=True))


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_accelerates_sharding_over_two_ranks_resumes_each_rank_at_the_index_level() -> None:
    """Whole batches in turn over 2 ranks, the last round topped up; unshuffled, so no
    generator is broadcast and the ranks can be built in one process."""

    def prepared(rank: int) -> Any:
        data = HfData(world_size=2, rank=rank)
        return shard_hf(_loader(2, shuffle=False), data, GradientState({}))

    for rank in (0, 1):
        torch.manual_seed(0)
        expected = list(prepared(rank))
        torch.manual_seed(0)
        resumed = prepared(rank)
        stopped = iter(resumed)
        head = [next(stopped)]
        state, rng = resumed.state_dict(), torch.get_rng_state()
        # Ended first, as in the test above: the stopped iterator's workers prefetch on
        # and would count loads of theirs after the reset (a run beside two CPU hogs).
        del stopped, resumed
        gc.collect()
        again = prepared(rank)
        again.load_state_dict(state)
        torch.set_rng_state(rng)
        again.skip_batches(1)
        LOADS.value = 0
        tail = list(again)
        assert LOADS.value == sum(len(b) for b in tail) and len(head + tail) == 4
        assert all(torch.equal(a, b) for a, b in zip(head + tail, expected, strict=True))


@pytest.mark.parametrize("sharding", list(SHARDINGS))
def test_an_iterable_dataset_with_state_resumes_through_it(project: Path, sharding: str) -> None:
    make = SHARDINGS[sharding]
    whole = _run(make, 0, dataset=Counting())
    first = _run(make, 0, stop=3, dataset=Counting())
    rest = _run(make, 0, resume=True, dataset=Counting())
    assert all(torch.equal(a, b) for a, b in zip(first + rest, whole, strict=True))
    assert len(first + rest) == len(whole) and LOADS.value == sum(len(b) for b in rest)


@pytest.mark.parametrize(
    ("dataset", "workers", "options", "why"),
    [
        (Counting(stateful=False), 0, {}, "its Counting has no state_dict()/load_state_dict()"),
        pytest.param(
            Counting(), 2, {}, "state lives in num_workers > 0 worker processes", marks=SLOW
        ),
    ],
    ids=["iterable-without-state", "iterable-in-workers"],
)
def test_a_loader_accel_cannot_resume_exactly_gets_one_line_at_prepare(
    project: Path, dataset: Any, workers: int, options: dict[str, Any], why: str
) -> None:
    for make in SHARDINGS.values():
        acc = make()
        with pytest.warns(UserWarning) as caught:
            loader = acc.prepare(_loader(workers, dataset, **options))
        (message,) = [str(w.message) for w in caught if "prepare()" in str(w.message)]
        assert why in message and "\n" not in message
        assert "not exact" in message and "skip_batches() loads" in message
        loader.skip_batches(2)
        skipped = len(list(loader))  # loaded and dropped, as the message says
        assert skipped == len(list(loader)) - 2  # the next epoch is whole again
        if workers == 0:  # (in workers, each holds a copy of the dataset: a longer epoch)
            assert skipped == len(loader) - 2


def test_an_exactly_resumable_loader_prepares_without_a_word(project: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accel.Accelerator(seed=0).prepare(_loader(2))  # prepared, not iterated: no worker
        accel.Accelerator().prepare(_loader(2, persistent_workers=True))
        accel.Accelerator().prepare(_loader(0, Counting()))


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata 0.11 on torch 2.13
def test_a_stateful_dataloader_resumes_through_its_state_dict(project: Path) -> None:
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader", reason="torchdata is not installed"
    )

    def run(stop: int = 0, resume: bool = False) -> list[torch.Tensor]:
        torch.manual_seed(0)
        acc = accel.Accelerator()
        data = torch.arange(40.0)
        loader = acc.prepare(stateful.StatefulDataLoader(data, batch_size=4, shuffle=True))
        step = (acc.load_state() or 0) if resume else 0
        seen = []
        while step < 2 * len(loader):
            loader.set_epoch(step // len(loader))
            loader.skip_batches(step % len(loader))  # a restored state makes it a no-op
            for batch in loader:
                seen.append(batch + torch.rand(1))  # the global RNG goes on as unresumed
                step += 1
                if step == stop:
                    acc.save_state(step)
                    return seen
        return seen

    whole = run()
    for stop in (3, 13):
        first, rest = run(stop=stop), run(resume=True)
        assert len(first + rest) == len(whole) == 20
        assert all(torch.equal(a, b) for a, b in zip(first + rest, whole, strict=True))
    saved = accel.Accelerator().checkpoints.load(13)["loaders"][0]
    assert saved["epoch"] == 1 and saved["source"]["_num_yielded"] == 3


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata 0.11 on torch 2.13
def test_a_stateful_dataloader_over_two_ranks_is_sharded_and_resumed_by_its_state() -> None:
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader", reason="torchdata is not installed"
    )

    def prepared(rank: int) -> Any:
        made = stateful.StatefulDataLoader(torch.arange(40.0), batch_size=4, shuffle=True)
        return shard_loader(made, 2, rank, seed=7)

    halves = []
    for rank in (0, 1):
        whole = prepared(rank)
        whole.set_epoch(1)
        expected = list(whole)
        stopped = prepared(rank)
        stopped.set_epoch(1)
        head = list(itertools.islice(iter(stopped), 2))
        again = prepared(rank)
        again.load_state_dict(stopped.state_dict())
        again.skip_batches(2)  # the state starts after them already
        tail = list(again)
        assert all(torch.equal(a, b) for a, b in zip(head + tail, expected, strict=True))
        halves.append(torch.cat(expected))
    assert sorted(torch.cat(halves).tolist()) == list(range(40))


@pytest.mark.parametrize("sharding", list(SHARDINGS))
def test_a_dropped_loader_is_freed_at_once_not_by_the_cycle_collector(
    project: Path, sharding: str
) -> None:
    """A prepared loader and its iterator go when the script lets go of them, as a
    DataLoader does. Left to the cycle collector, torch's iterator shuts its workers
    down after the queues' finalizers ran: each worker waits out its 5 s join (a
    script that stops mid-epoch, persistent workers, 10 s for two)."""
    import gc
    import weakref

    gc.disable()
    try:
        loader = SHARDINGS[sharding]().prepare(_loader(0))
        for _ in range(2):
            for _batch in loader:
                break  # mid-epoch, as a script that stops at a step does
        prepared, inner = weakref.ref(loader), weakref.ref(loader.loader)  # inner: its iterator's
        del loader
        assert prepared() is None and inner() is None
    finally:
        gc.enable()
