"""Where a worker stands: its rank, precision, device and process group.

Each choice is the ``Accelerator`` argument, else the variable ``accel launch`` sets
(``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_USE_CPU``), else the configuration,
read only when neither says.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import time
import warnings
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from accel.accelerator._gloo_idle import wait_for_gloo_workers as wait_for_gloo_workers
from accel.errors import UsageError, one_line

if TYPE_CHECKING:
    import torch

    from accel.workspace import Workspace

TRUE = ("1", "true", "yes", "on")
PRECISIONS = ("no", "fp16", "bf16")


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name, default))
    except ValueError:
        raise UsageError(f"environment variable {name}={env[name]!r} is not an integer") from None


def where(env: Mapping[str, str]) -> tuple[int, int, int]:
    """(rank, local rank, world size) of this worker.

    In a world someone else started (Ray Train, ``mp.spawn`` with ``init_process_group(rank=,
    world_size=)``, a custom launcher) the group is the truth, whatever ``RANK`` and
    ``WORLD_SIZE`` say or whether they are set at all: every rank reading 0 from a missing
    ``RANK`` would think it is the main one. Else torchrun's variables (``accel launch``
    sets them), else a lone process.
    """
    rank, local_rank = env_int(env, "RANK", 0), env_int(env, "LOCAL_RANK", 0)
    world_size = env_int(env, "WORLD_SIZE", 1)
    joined = _existing_group()
    if joined is None:
        return rank, local_rank, world_size
    rank, world_size = joined
    if "LOCAL_RANK" not in env:  # one node, one GPU a rank: what mp.spawn's scripts assume
        gpus = _gpus()
        local_rank = rank % gpus if gpus else 0
    return rank, local_rank, world_size


def _existing_group() -> tuple[int, int] | None:
    if "torch.distributed" not in sys.modules:  # nobody imported it: nobody started a group
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_rank(), dist.get_world_size()


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def precision(value: str | None, env: Mapping[str, str], ws: Workspace) -> str:
    chosen = value or env.get("ACCELERATE_MIXED_PRECISION")
    chosen = chosen or ws.settings.launch.mixed_precision
    if chosen not in PRECISIONS:
        raise UsageError(f"mixed precision {chosen!r} is not one of no, fp16, bf16")
    return str(chosen)


def device(
    cpu: bool | None, env: Mapping[str, str], ws: Workspace, local_rank: int
) -> torch.device:
    """The CPU when asked or without a GPU; else this rank's GPU (made current)."""
    import torch

    if cpu is None:
        flag = env.get("ACCELERATE_USE_CPU")
        cpu = flag.lower() in TRUE if flag else bool(ws.settings.launch.use_cpu)
    if cpu or not torch.cuda.is_available():
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def grad_scaler(mixed_precision: str, on: torch.device, options: Any = None) -> Any:
    """A ``GradScaler`` for fp16 (bf16 has fp32's range: it needs none); else None.
    ``options``: a ``GradScalerKwargs``' (``init_scale``, ``growth_factor``, ...)."""
    if mixed_precision != "fp16":
        return None
    import torch

    return torch.amp.GradScaler(on.type, **(options or {}))


def autocast(precision: str, on: torch.device, options: Mapping[str, Any]) -> Any:
    """``torch.autocast`` for ``precision``; for ``no``, a no-op. Either is a context
    manager and a decorator, as Accelerate's ``autocast()``."""
    if precision == "no":
        return NoAutocast()
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=on.type, dtype=dtype, **options)


class NoAutocast(contextlib.nullcontext[None], contextlib.ContextDecorator):
    """``autocast()`` without mixed precision: nothing, used with ``with`` or as ``@``."""


AUTOCAST = "_accel_autocast"  # on the forward autocast_forward sets


def autocast_forward(model: Any, autocast: Any) -> None:
    """``model.forward`` under ``autocast()``, its float outputs back in fp32, as
    Hugging Face Accelerate's prepared models run (its scripts never call autocast).

    As Accelerate's, the new forward is a method of ``model`` (``copy.deepcopy`` binds
    it to the copy, which runs its own weights; a pickled model is the plain one) and the
    one it replaces is ``model._original_forward``, which
    ``unwrap_model(keep_fp32_wrapper=False)`` puts back (:func:`strip_autocast`).
    """
    import types

    inner = model.forward
    if getattr(inner, AUTOCAST, False):
        return  # prepared already: once is enough
    model._original_forward = inner
    method = isinstance(inner, types.MethodType) and inner.__self__ is model
    if method:
        model.forward = types.MethodType(_autocast(inner.__func__, autocast), model)
    else:  # a forward set on the instance that is no method of it: wrapped as it is
        model.forward = _autocast(inner, autocast)


def _autocast(inner: Any, autocast: Any) -> Any:
    import functools

    import torch

    @functools.wraps(inner)  # its name: a pickled method is getattr(model, name)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with autocast():
            out = inner(*args, **kwargs)
        return _to_fp32(out, torch)

    setattr(forward, AUTOCAST, True)  # a bound method reads its function's attributes
    return forward


def strip_autocast(model: Any) -> None:
    """Undo :func:`autocast_forward` (Accelerate's ``keep_fp32_wrapper=False``)."""
    original = vars(model).pop("_original_forward", None)
    if original is None:
        return
    plain = getattr(type(model), "forward", None)
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", 0) is plain:
        vars(model).pop("forward", None)  # the class's own forward: no instance attribute
    else:
        model.forward = original


class WaitForSnapshot:
    """The ``load_state_dict`` pre-hook ``prepare`` puts on models and optimizers: it
    waits for the snapshot in flight (it is copying these tensors). It holds the
    accelerator weakly and pickles as a no-op, so ``torch.save`` of a whole model works."""

    def __init__(self, accelerator: Any = None) -> None:
        self._accelerator = None if accelerator is None else weakref.ref(accelerator)

    def __call__(self, *_: Any) -> None:
        accelerator = None if self._accelerator is None else self._accelerator()
        if accelerator is not None:
            accelerator.wait_for_snapshot()

    def __reduce__(self) -> tuple[Any, ...]:
        return WaitForSnapshot, ()

    def __deepcopy__(self, memo: Any) -> WaitForSnapshot:
        return self  # a copy of a prepared model waits as the model does


def _to_fp32(data: Any, torch: Any) -> Any:
    if isinstance(data, torch.Tensor):
        return data.float() if data.dtype in (torch.float16, torch.bfloat16) else data
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return type(data)(_to_fp32(item, torch) for item in data)
    if isinstance(data, dict):
        for key in list(data):  # in place: model outputs (ModelOutput) are dicts with extras
            data[key] = _to_fp32(data[key], torch)
    return data


def init_group(
    world_size: int, rank: int, on: torch.device, options: Mapping[str, Any] | None = None
) -> bool:
    """Start the process group (nccl on GPU, gloo on CPU); whether this call started it.
    ``options``: an ``InitProcessGroupKwargs``' (``backend``, ``timeout``)."""
    if world_size <= 1:
        return False
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    options = dict(options or {})
    backend = options.pop("backend", None) or ("nccl" if on.type == "cuda" else "gloo")
    kwargs: dict[str, Any] = {"device_id": on} if backend == "nccl" else {}
    kwargs.update({k: v for k, v in options.items() if k in ("timeout", "init_method")})
    if kwargs.get("init_method", "env://") == "env://":
        await_rank0_store(rank, os.environ)
    dist.init_process_group(backend=backend, rank=rank, world_size=world_size, **kwargs)
    atexit.register(_end_group_at_exit)
    return True


def share_with_accelerate(on: torch.device) -> None:
    """Hugging Face Accelerate's ``PartialState`` made for this run, where the script
    imported Accelerate: its ``accelerate.utils`` collectives (``gather_object``,
    ``gather``, ``reduce``, ``broadcast``), ``accelerate.logging`` and ``PartialState()``
    then see every rank, as beside Accelerate's own ``Accelerator`` (they had seen one
    process: a metric gathered from half the samples, silently). Public API only."""
    if "accelerate" not in sys.modules:
        return
    try:
        from accelerate.state import PartialState  # type: ignore[import-not-found,unused-ignore]

        PartialState(cpu=on.type == "cpu")
    except Exception as exc:  # noqa: BLE001 - a courtesy to the other library: say, go on
        warnings.warn(
            f"Hugging Face Accelerate's PartialState could not join this run "
            f"({one_line(exc)}): its accelerate.utils collectives see this process alone; "
            "use the Accelerator's (acc.gather, acc.reduce)",
            RuntimeWarning,
            stacklevel=3,
        )


#: Seconds a rank polls for rank 0's store before it leaves the wait to torch.
STORE_POLL_LIMIT = 30.0


def await_rank0_store(rank: int, env: Mapping[str, str], limit: float = STORE_POLL_LIMIT) -> None:
    """Return once rank 0's store (``MASTER_ADDR:MASTER_PORT``) accepts a connection.

    Under ``accel launch`` with restarts on several nodes (on one, the launcher hosts
    the store: accel.launch.agent.AttemptStore), and under torchrun with
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, rank 0 of each attempt hosts a fresh
    TCPStore and every rank starts at once: a rank that dials it before it listens is
    refused, and torch's client then sleeps a randomized backoff, 0.4 to 0.7 s, before
    it dials again, while every rank waits for it. Polled here every few milliseconds
    instead, the group starts as soon as the store listens. Only a refusal is waited on,
    at most ``limit`` seconds (torch's own wait takes over then); any other answer, and
    rank 0 or a store the agent or launcher hosts (listening before any worker starts),
    leave it all to torch.
    """
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT", "")
    agents = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # torch's test of it
    if rank == 0 or agents or not host or not port.isdigit():
        return
    deadline, pause = time.monotonic() + limit, 0.001
    while time.monotonic() + pause <= deadline:
        try:
            socket.create_connection((host, int(port)), timeout=limit).close()
        except ConnectionRefusedError:
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        except OSError:  # unreachable, unknown host, a timeout: torch reports it its way
            return
        else:
            return


def _end_group_at_exit() -> None:
    end_group(at_exit=True)


#: Seconds a crashed rank's exit gives the group's destruction before it exits 1.
CRASHED_TEARDOWN_GRACE = 5.0
#: Seconds a rank's exit waits for its peers to reach theirs (gloo) before it goes on.
EXIT_BARRIER_TIMEOUT = 30.0


def _exit_barrier() -> None:
    """At the exit of a script that did not call ``end()``: wait, bounded, for every peer
    to reach its own exit before destroying the group.

    A rank that destroys its gloo group while a peer is still inside their last
    collective (its final message not yet read) makes gloo abort that peer ("terminate
    called without an active exception"); two ranks refusing the same checkpoint and
    exiting 3 aborted 1 time in 12 under load. gloo's ``monitored_barrier`` has a
    timeout: a peer that crashed fails it at once (its connection closes), a stuck one
    costs :data:`EXIT_BARRIER_TIMEOUT` seconds. NCCL has no barrier that can time out,
    and a hung one at exit is worse than the race: no barrier there.
    """
    try:
        from datetime import timedelta

        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        if dist.get_backend() != "gloo" or dist.get_world_size() < 2:
            return
        dist.monitored_barrier(timeout=timedelta(seconds=EXIT_BARRIER_TIMEOUT))
    except BaseException:  # noqa: BLE001 - a peer gone or late: destroy all the same
        return


def end_group(*, at_exit: bool = False) -> None:
    """Destroy the process group accel started, if it still stands; never raises.

    Run by ``Accelerator.end()`` and, for a script that never calls it, at interpreter
    exit (registered by :func:`init_group` only when accel started the group, so it
    outlives the ``Accelerator`` object). At exit no plain barrier: a peer may be gone,
    and one would wait for it forever; a returned script's exit waits for its peers
    only through :func:`_exit_barrier`, which is bounded. ``destroy_process_group()`` is what
    torch asks for. Its gloo worker threads live on while anything (DDP) holds the
    group, and one that takes the GIL after the interpreter began to finalize aborts
    the process ("terminate called without an active exception", exit -6): the
    destruction is followed by a wait for them to go idle (:mod:`._gloo_idle`).

    At the exit of a script that raised, a peer may be stuck in a collective, and
    destroying the group beside it can hang (torch 2.6's gloo joins its threads in the
    group's destructor, holding the GIL). The crashed rank must neither abort nor hang,
    so the destruction gets :data:`CRASHED_TEARDOWN_GRACE` seconds, after which the
    process ends with exit code 1, the interpreter's own for an uncaught exception.
    The watchdog is faulthandler's: a C thread that needs no GIL to end the process.
    """
    crashed = at_exit and getattr(sys, "last_value", None) is not None
    if not crashed:
        if at_exit:
            _exit_barrier()
        _destroy()
        wait_for_gloo_workers()  # a worker still holding the group's last work aborts
        return
    import faulthandler

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    global _watchdog_sink
    _watchdog_sink = open(os.devnull, "w")  # noqa: SIM115 - open until the process ends
    faulthandler.dump_traceback_later(CRASHED_TEARDOWN_GRACE, exit=True, file=_watchdog_sink)
    try:
        _destroy()
        wait_for_gloo_workers()
    finally:
        faulthandler.cancel_dump_traceback_later()


_watchdog_sink: Any = None  # where the crashed-exit watchdog writes the stacks it drops


def _destroy() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - nothing at exit may turn a success into a failure
        return
