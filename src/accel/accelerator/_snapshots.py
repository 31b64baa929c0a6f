"""``checkpoints.snapshot_every``: a snapshot of the training state every N optimizer steps,
taken beside training and kept in the launcher's memory tier (:mod:`accel.store.memtier`).

The count is the Accelerator's count of optimizer steps (a gated or skipped step is not
one), saved in every checkpoint as ``optimizer_steps`` and restored by ``load_state``.
A snapshot of step *k* holds what ``save_state(k)`` at the end of iteration *k* writes,
taken in two moments:

- right after the optimizer's *k*-th ``step()`` (a step post-hook): the models' and
  optimizers' tensors (rank 0), the loaders' positions and the RNG states. What only an
  optimizer changes is copied in a thread while the next forward and backward run
  (:class:`accel.store.async_save.SnapshotPool`); module buffers are copied at once;
- when the iteration ends, at the next optimizer ``step()`` (a pre-hook), ``save_state``,
  ``load_state`` or ``end()``: the LR schedulers, the gradient scaler and the registered
  objects, which step after the optimizer. Without any of them the snapshot is whole at
  the first moment, and closes there: its write need not wait for the next step. With LR
  schedulers alone, it closes at the first forward after the step (a forward pre-hook of
  the prepared models), when a loop has stepped them, and the iteration's end checks that
  they have not changed since: a snapshot that ends otherwise is dropped, with one line,
  and the run's snapshots close at the iteration's end from then on.

The pre-hook then waits for the copy (the global fence), and the thread writes the
snapshot into this rank's slot of the tier. A snapshot whole at the first moment whose
slot is rewritten in place skips the copy: the thread writes the slot from training's
tensors themselves, one pass instead of two, and the fence waits for that write.
Without a tier (no ``accel launch``, several nodes, FSDP's sharded state, or shared
memory too small: one line says which) every ``persist_every``-th step is saved
blocking instead, at the same moment.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel.store.async_save import Snapshot


class _Taken:
    """A snapshot between its two moments."""

    def __init__(
        self, step: int, snapshot: Snapshot | None, early: dict[str, Any], turn: int
    ) -> None:
        self.step = step
        self.snapshot = snapshot
        self.early = early
        self.late: dict[str, Any] = {}
        self.closed = threading.Event()
        self.turn = turn  # the pools it copies into
        self.at_forward = False  # may close at the next forward (LR schedulers alone)
        self.ended = threading.Event()  # the iteration ended (at or after the close)
        self.changed = False  # closed at a forward, what it read changed before the end


class Snapshots:
    def __init__(self, acc: Any, every: int, persist: int | None) -> None:
        # ``acc``: the Accelerator (not imported: it imports this module)
        from accel.store.async_save import SnapshotPool
        from accel.store.memtier import DIR_ENV, SlotWriter

        self.acc = acc
        self.every = every
        self.persist = persist
        self.count = 0
        tier = os.environ.get(DIR_ENV)
        self.writer = SlotWriter(Path(tier), acc.rank, acc.world_size) if tier else None
        # Two pools, used in turn: a snapshot's write may go on through the next step
        # while the next snapshot copies into the other pool.
        self._pools = (SnapshotPool(), SnapshotPool())
        self._late_pools = (SnapshotPool(), SnapshotPool())  # what steps after the optimizer
        self._turn = 0
        self._taken: _Taken | None = None
        self._writers: list[tuple[threading.Thread, threading.Event]] = []  # oldest first
        self._due: int | None = None  # a blocking save at the end of this iteration
        self._open: _Taken | None = None  # closed at a forward, its iteration not ended
        self._early = True  # a forward closes the next snapshot before the next step
        self._at_forward = True  # off once a snapshot closed at a forward changed
        self._forwards: set[int] = set()  # the models whose forward closes a snapshot
        self._checked = False
        self._said: set[str] = set()
        if self.writer is None:
            self._say(
                "accel: checkpoints.snapshot_every keeps snapshots only under accel launch; "
                + (
                    f"saving a checkpoint every {persist} steps instead"
                    if persist
                    else "no snapshots are taken"
                )
            )

    def hook(self, optimizer: Any) -> None:
        """Count ``optimizer``'s steps (the first prepared optimizer's)."""
        optimizer.register_step_pre_hook(lambda *_: self.close())
        optimizer.register_step_post_hook(lambda *_: self.after_step())

    # -- the two moments ------------------------------------------------------------------

    def after_step(self) -> None:
        self.count += 1
        if self.count % self.every:
            return
        while len(self._writers) > 1:  # the write that used this turn's pool, done
            self._join_oldest()
        if self.writer is not None and not self._checked:
            self._check_space()
        if self.writer is None:
            if self.persist and self.count % self.persist == 0:
                self._due = self.count
            return
        from accel.accelerator._rng import rng_state
        from accel.store.async_save import outside_optimizers

        acc = self.acc
        snapshot, turn = None, self._turn
        if acc.rank == 0:  # the replicated state: rank 0 alone writes it, as a save does
            models, optimizers, _ = acc._state_dicts()
            later = outside_optimizers(acc._optimizers)
            copy_later = lambda tensor: not later(tensor)  # noqa: E731
            snapshot = self._pools[turn].take((models, optimizers), copy_later)
            self._turn = 1 - turn
        early = {
            "loaders": [loader.state_dict() for loader in acc._loaders],
            "accumulation_step": acc._gradient_state.step,
            "rng": rng_state(),
        }
        taken = self._taken = _Taken(self.count, snapshot, early, turn)
        if not (acc._schedulers or acc._custom_objects or acc.scaler is not None):
            self.close()  # nothing steps after the optimizer: the snapshot is whole now
        elif self._at_forward and not (
            acc._custom_objects or acc.scaler is not None or acc.gradient_accumulation_steps > 1
        ):
            # Not with registered objects (they step anywhere), the scaler (its state is a
            # device sync) or accumulation (a prepared scheduler counts every micro-step).
            taken.at_forward = True
            self._hook_forwards()
        before = self._writers[-1][1] if self._writers else None
        done = threading.Event()
        thread = threading.Thread(
            target=self._write,
            args=(taken, before, done),
            name=f"accel-snapshot-{self.count}",
            daemon=True,
        )
        self._writers.append((thread, done))
        thread.start()

    def close(self) -> None:
        """The iteration ended: what steps after the optimizer is read now."""
        due, self._due = self._due, None
        if due is not None:
            self.acc._save(due, async_save=False)
        # What steps after the optimizer is read where it is written: rank 0.
        opened, self._open = self._open, None
        if opened is not None:  # closed at a forward: the end must hold what it read
            if opened.snapshot is not None:
                opened.changed = not _same(self._late(), opened.late)
            if opened.changed:  # a loop that steps them later: close at the end from now on
                self._at_forward = False
            opened.ended.set()
        taken, self._taken = self._taken, None
        if taken is None:
            return
        if taken.snapshot is not None:  # copied now: an EMA a registered object holds
            taken.late = self._late_pools[taken.turn].snapshot(self._late())  # moves on
        taken.ended.set()
        self._closed(taken)

    def _forward(self) -> None:
        """A prepared model's forward begins: the loop stepped its schedulers (unless it
        steps them later still: the iteration's end tells, :meth:`close`)."""
        taken = self._taken
        if taken is None or not taken.at_forward:
            return
        self._taken, self._open, self._early = None, taken, True
        if taken.snapshot is not None:  # the end compares it with the state then
            taken.late = copy.deepcopy(self._late())
        self._closed(taken)

    def _closed(self, taken: _Taken) -> None:
        taken.closed.set()
        if taken.snapshot is not None:
            taken.snapshot.waiting.set()

    def _late(self) -> dict[str, Any]:
        acc = self.acc
        return {
            # the schedulers set the optimizers' learning rates (their param_groups) too
            "param_groups": [o.state_dict()["param_groups"] for o in acc._optimizers],
            "schedulers": [s.state_dict() for s in acc._schedulers],
            "scaler": acc.scaler.state_dict() if acc.scaler is not None else None,
            "custom": [obj.state_dict() for obj in acc._custom_objects],
        }

    def _hook_forwards(self) -> None:
        for model in self.acc._models:
            if id(model) not in self._forwards:
                self._forwards.add(id(model))
                model.register_forward_pre_hook(lambda *_: self._forward())

    def _join_oldest(self) -> None:
        thread, _ = self._writers.pop(0)
        thread.join()

    def join(self) -> None:
        while self._writers:
            self._join_oldest()

    def settle(self) -> None:
        """Before a save, a load or the end: the snapshot in flight finished."""
        self.close()
        self.join()

    def unmap(self) -> None:
        """At the end (settled): let go of the tier's files (they stay for the launcher)."""
        if self.writer is not None:
            self.writer.close()

    # -- the writer's thread --------------------------------------------------------------

    def _write(self, taken: _Taken, before: threading.Event | None, done: threading.Event) -> None:
        try:
            self._write_in_turn(taken, before)
        finally:
            if taken.snapshot is not None:
                taken.snapshot.read()  # whatever failed: the fence never waits forever
            done.set()

    def _write_in_turn(self, taken: _Taken, before: threading.Event | None) -> None:
        from accel.errors import AccelError
        from accel.layout import rank_name
        from accel.store.manifest import STATE_TENSORS, TENSORS_SUFFIX
        from accel.store.memtier import files_of

        snapshot, early = taken.snapshot, taken.early
        assert self.writer is not None
        # One pass where it can: a snapshot whole at the step (nothing steps after the
        # optimizer), the snapshot before it in the tier, and a slot to rewrite in place
        # now, is written from training's tensors themselves while the fence holds the
        # next step, instead of copied first and written from the copy (two passes over
        # the state, on the cores training uses: docs/benchmarks.md). A snapshot that the
        # next forward may close (a loop steps its LR schedulers right after the step)
        # waits for it, or for the next step's fence, and then copies as before.
        slot = None
        # (Device tensors are copied on a side stream instead: accel.store.async_save.)
        if (
            snapshot is not None
            and snapshot.on_host
            and (taken.closed.is_set() or (taken.at_forward and self._early))
        ):
            snapshot.waiting.wait()  # set already when closed
            if taken.closed.is_set() and (before is None or before.is_set()):
                slot = self.writer.ready(files_of(self.acc.rank))
            elif not taken.closed.is_set():
                self._early = False  # the forward came after the step: copy from now on
        direct = slot is not None
        if snapshot is not None and not direct:
            snapshot.copy()  # at full speed: the next optimizer step may be waiting
        taken.closed.wait()
        if before is not None:
            before.wait()  # snapshots reach the tier in their order
        # At training's own priority, unlike a save's write (nice 10): a snapshot must
        # reach the tier within the next step for a crash to lose one step. Niced, on
        # two saturated cores it lagged: 2 steps lost in 3 of 4 kills, 1 in 4 of 4
        # without (docs/benchmarks.md, "What a crash costs").
        if snapshot is not None and snapshot.torn:
            self._torn(taken.step, snapshot.torn)
            return
        acc, late = self.acc, taken.late
        trees: dict[str, Any] = {rank_name(acc.rank, TENSORS_SUFFIX): {"rng": early["rng"]}}
        if snapshot is not None:
            models, optimizers = snapshot.sources() if direct else snapshot.tree
            optimizers = [
                {**optimizer, "param_groups": groups}
                for optimizer, groups in zip(optimizers, late["param_groups"], strict=True)
            ]
            trees = {
                STATE_TENSORS: checkpoint_state(
                    taken.step,
                    models,
                    optimizers,
                    [],
                    late["schedulers"],
                    early["loaders"],
                    late["scaler"],
                    None,
                    late["custom"],
                    early["accumulation_step"],
                    taken.step,
                ),
                **trees,
            }
        due = self.persist is not None and taken.step % self.persist == 0
        timeout = acc.checkpoints.settings.collective_timeout
        try:
            self.writer.write(
                taken.step,
                acc.checkpoints.series_name,
                trees,
                keep=timeout if due else None,
                wait=timeout,
                written=None if snapshot is None else lambda: self._ended(taken, direct),
                slot=slot,
            )
        except (AccelError, OSError) as exc:
            self._say(str(exc))
        finally:
            if direct and snapshot is not None and not snapshot.read():
                self._torn(taken.step, snapshot.torn)

    def _ended(self, taken: _Taken, direct: bool) -> bool:
        """Written: whether the slot may name the step. A one-pass write's tensors are
        checked (and the fence lets go of them); a snapshot a forward closed waits for
        its iteration's end, which must hold what it read."""
        assert taken.snapshot is not None
        read = taken.snapshot.read() if direct else True
        taken.ended.wait()
        if taken.changed:
            self._say(
                f"accel: the snapshot of step {taken.step} was skipped: an LR scheduler "
                "changed after the first forward that followed the optimizer's step; "
                "snapshots read the schedulers at the next step from now on"
            )
        return read and not taken.changed

    def _torn(self, step: int, torn: list[str]) -> None:
        self._say(
            f"accel: the snapshot of step {step} was skipped: {torn[0]} changed while it "
            "was copied (change what an optimizer owns only in its step())"
        )

    def _check_space(self) -> None:
        """Once, before the first snapshot, on every rank alike: can the tier hold three
        snapshots of every rank (four with persist_every)? If not, one line, and blocking
        saves instead."""
        from accel.store.memtier import SLOTS, full_message, headroom

        assert self.writer is not None
        self._checked = True
        acc = self.acc
        if acc._sharder is not None:  # the same on every rank: FSDP is a launch setting
            self._say(
                "accel: checkpoints.snapshot_every does not snapshot FSDP's sharded state; "
                "checkpoints are saved blocking every persist_every steps instead"
            )
            self.writer = None
            return
        if len(acc._optimizers) > 1:  # the same on every rank: what the script prepared
            # Taken at the first one's step, a snapshot would miss the others' steps of
            # that iteration (a GAN's generator, a second optimizer for some parameters).
            self._say(
                "accel: checkpoints.snapshot_every snapshots at an optimizer's step, and "
                f"this script steps {len(acc._optimizers)}; checkpoints are saved blocking "
                "every persist_every steps instead"
            )
            self.writer = None
            return
        store = acc.checkpoints
        store.wait()  # its collectives and ours share a group: one at a time
        mine = 1 << 20
        if acc.rank == 0:
            mine += _tree_bytes((acc._state_dicts()[:2], self._late()))  # an EMA's too
        sizes = store._dist_context().all_gather([mine, self.writer.free_bytes()])
        slots = len(SLOTS) + (1 if self.persist else 0)  # and one being persisted
        free = sizes[0][1]  # rank 0's view decides, the same on every rank
        needed = slots * sum(size for size, _ in sizes) + headroom(free)
        if needed > free:
            self._say(full_message(self.writer.tier, needed, self.persist))
            self.writer = None

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            print(line, file=sys.stderr, flush=True)


def _same(a: Any, b: Any) -> bool:
    """Whether two state trees hold the same values (a NaN is itself; a tensor its bytes)."""
    import torch

    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, float) and a != a:
        return bool(b != b)
    return bool(a == b)


def _tree_bytes(tree: Any) -> int:
    """Bytes of the tensors in ``tree`` (what a snapshot file of it needs, near enough)."""
    import torch

    if isinstance(tree, dict):
        return sum(_tree_bytes(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_tree_bytes(v) for v in tree)
    if isinstance(tree, torch.Tensor):
        return tree.numel() * tree.element_size()
    return 0


def checkpoint_state(
    step: int,
    models: list[Any],
    optimizers: list[Any],
    sharded: list[str],
    schedulers: list[Any],
    loaders: list[Any],
    scaler: Any,
    extra: Any,
    custom: list[Any],
    accumulation_step: int,
    optimizer_steps: int | None,
) -> dict[str, Any]:
    """The state tree of a checkpoint: one function for ``save_state`` and the snapshots
    of ``checkpoints.snapshot_every``, which must write the same bytes."""
    return {
        "step": step,
        "models": models,
        "optimizers": optimizers,
        "sharded": sharded,
        "schedulers": schedulers,
        "loaders": loaders,
        "scaler": scaler,
        "extra": extra,
        "custom": custom,
        "accumulation_step": accumulation_step,
        "optimizer_steps": optimizer_steps,
    }
