"""What ``Accelerator.load_state`` reads, and on which step every rank agrees.

Every part of a checkpoint is read and verified before anything is restored: the shared
state (``state.tensors``), this rank's RNG states (``rank-N.tensors``), then the sharded
state (a collective that verifies every rank's files before it reads one). The ranks then
agree: when any of them could not read the step, none restores it. A resume
(``load_state()`` without a step) then falls back to the next older checkpoint of the
series, with a warning naming the bad one and the command that removes it; an explicit
step is never swapped for another.

A checkpoint that ``Accelerator.save_state`` did not write (``ws.checkpoints.save``) is
refused with one line saying how to load it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from accel.errors import AccelError, IntegrityError, UsageError, one_line
from accel.layout import rank_log
from accel.store.persister import await_commit
from accel.store.persister import release as release_restored

if TYPE_CHECKING:
    from accel.workspace import Workspace


class Accelerator(Protocol):
    """What of ``accel.Accelerator`` a load needs (a protocol: no import circle)."""

    rank: int
    world_size: int
    device: Any
    workspace: Workspace

    @property
    def is_main_process(self) -> bool: ...

    @property
    def checkpoints(self) -> Any: ...


__all__ = ["Loaded", "agreed_step", "load", "refuse_foreign", "restore"]

# The keys every Accelerator.save_state has written (later ones are read with .get).
SAVED_KEYS = ("step", "models", "optimizers")
_OK, _BAD, _FAILED = 0, 1, 2  # read it; it does not verify here; another error here


@dataclass
class Loaded:
    step: int
    state: dict[str, Any]
    rank_state: Any
    restored: frozenset[str] = field(default_factory=frozenset)


def refuse_foreign(state: Any, step: int, series: str) -> dict[str, Any]:
    """``state`` when ``Accelerator.save_state`` wrote it; else one UsageError line."""
    if isinstance(state, dict) and all(key in state for key in SAVED_KEYS):
        return state
    holds = type(state).__name__
    if isinstance(state, dict):
        holds += f" of {', '.join(repr(str(k)) for k in list(state)[:4]) or 'nothing'}"
    raise UsageError(
        f"checkpoint step {step} of series {series!r} was not written by "
        f"Accelerator.save_state (it holds a {holds}): load it with "
        f"ws.checkpoints.load({step}), or pass load_state() a step save_state wrote"
    )


def agreed_step(acc: Accelerator, step: int | None) -> int | None:
    """``step``, or rank 0's newest; every rank gets rank 0's answer, even if a save
    lands meanwhile."""
    from accel.store.collectives import arrive

    await_commit()  # every rank, before the collectives: a long commit is no peer's timeout
    arrive("load_state", float(acc.workspace.settings.checkpoints.arrival_timeout))
    if step is None and acc.is_main_process:
        latest = acc.checkpoints.latest()
        step = None if latest is None else latest.step
    return _broadcast(acc, step)


def load(
    acc: Accelerator,
    step: int,
    load_sharded: Callable[[int, dict[str, Any]], frozenset[str]],
    *,
    fallback: bool,
) -> Loaded:
    """Read ``step`` on every rank, or with ``fallback`` the newest older step every rank
    can read; ``load_sharded(step, state)`` restores the sharded state (a collective)."""
    series = acc.checkpoints.series_name
    while True:
        loaded: Loaded | None
        loaded, error = _attempt(_read, acc, step, series)
        codes = _agree(acc, error)
        if acc.is_main_process:  # every rank has read: the memory a restart read from goes
            release_restored()
        if loaded is not None and not any(codes):
            restored, error = _attempt(load_sharded, step, loaded.state)
            codes = _agree(acc, error)
            if not any(codes):
                loaded.restored = restored or frozenset()
                return loaded
        older = _older(acc, step) if fallback and _FAILED not in codes else None
        bad = [rank for rank, code in enumerate(codes) if code]
        if older is None:
            if error is not None:
                raise error
            cls = AccelError if _FAILED in codes else IntegrityError
            raise cls(
                f"rank {bad[0]} could not load checkpoint step {step} of series "
                f"{series!r}; its log ({rank_log(bad[0])}) says why"
            )
        _warn(acc, step, older, series, bad, error)
        step = older


def _read(acc: Accelerator, step: int, series: str) -> Loaded:
    state = refuse_foreign(acc.checkpoints.load(step, map_location="cpu"), step, series)
    return Loaded(step, state, acc.checkpoints.load_rank_state(step, acc.rank))


def _attempt(fn: Callable[..., Any], *args: Any) -> tuple[Any, Exception | None]:
    try:
        return fn(*args), None
    except Exception as exc:  # noqa: BLE001 - the other ranks must hear of it, not hang
        return None, exc


def _agree(acc: Accelerator, error: Exception | None) -> list[int]:
    """Every rank's outcome code, on every rank (an all-reduce of one slot per rank)."""
    mine = _OK if error is None else _BAD if isinstance(error, IntegrityError) else _FAILED
    if acc.world_size == 1:
        return [mine]
    import torch
    import torch.distributed as dist

    codes = torch.zeros(acc.world_size, dtype=torch.int64, device=acc.device)
    codes[acc.rank] = mine
    dist.all_reduce(codes)
    return [int(c) for c in codes.tolist()]


def _older(acc: Accelerator, step: int) -> int | None:
    """Rank 0's newest committed step below ``step``, on every rank."""
    older = None
    if acc.is_main_process:
        steps = [info.step for info in acc.checkpoints.list() if info.step < step]
        older = max(steps) if steps else None
    return _broadcast(acc, older)


def _broadcast(acc: Accelerator, step: int | None) -> int | None:
    if acc.world_size == 1:
        return step
    import torch
    import torch.distributed as dist

    # A tensor, not broadcast_object_list: that one unpickles what it receives.
    box = torch.tensor([-1 if step is None else step], dtype=torch.int64, device=acc.device)
    dist.broadcast(box, src=0)
    return None if int(box.item()) < 0 else int(box.item())


def _warn(
    acc: Accelerator,
    step: int,
    older: int,
    series: str,
    bad: list[int],
    error: Exception | None,
) -> None:
    ranks = ", ".join(str(r) for r in bad)
    line = (
        f"checkpoint step {step} of series {series!r} does not verify on rank {ranks}"
        f"{f' ({error})' if error is not None else ''}: resuming from step {older}; "
        f"remove the bad one with `accel checkpoints rm {step} --series {series} --force`"
    )
    if error is not None or acc.is_main_process:
        warnings.warn(line, RuntimeWarning, stacklevel=4)
    if acc.is_main_process:
        acc.workspace.log(line, "warning", command="load_state")


def restore(obj: Any, saved: Any, what: str, step: int) -> None:
    """``obj.load_state_dict(saved)``; a checkpoint another model or optimizer wrote is one
    line (torch's is several: every missing and unexpected key), naming the way out.

    The usual cause: two scripts of one project saving into the same series (``default``
    unless the launch names one), the second resuming from the first's newest step."""
    if what.startswith("model.") and isinstance(saved, dict):
        _plain_keys(obj, saved)
    try:
        obj.load_state_dict(saved)
    except (RuntimeError, ValueError, KeyError) as exc:
        kind, _, index = what.partition(".")
        raise does_not_fit(step, f"{kind} {index}", one_line(exc)) from None


def does_not_fit(step: int, what: str, detail: str) -> UsageError:
    """A checkpoint another model saved (or this model before its definition changed):
    one line, the same for what DDP and what FSDP loads; never a damaged checkpoint."""
    return UsageError(
        f"the checkpoint of step {step} does not fit this run's {what} ({detail}): "
        "another script saved it? prepare() what saved it, or give this script a series "
        "of its own (accel launch --run-name NAME, launch.run_name)"
    )


def _plain_keys(model: Any, saved: dict[str, Any]) -> None:
    """A checkpoint accel saved from a compiled or doubly wrapped model (before it saved
    the plain module's keys) loads into the plain module: its keys' ``_orig_mod.`` or
    ``module.`` prefix goes, where every key has it and none of the model's does."""
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    own = list(model.state_dict())
    for prefix in ("module.", "_orig_mod.", "module."):
        mine = any(key.startswith(prefix) for key in own)
        if saved and not mine and all(key.startswith(prefix) for key in saved):
            consume_prefix_in_state_dict_if_present(saved, prefix)
