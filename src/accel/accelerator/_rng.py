"""Every RNG's state, captured into a rank's checkpoint part and restored from it.

Tensors and plain values only (no numpy arrays), so the state loads with
``weights_only=True``: Python's state tuple becomes a tensor, numpy's keys too.
"""

from __future__ import annotations

import array
import contextlib
import random
import sys
from typing import Any


def rng_state() -> dict[str, Any]:
    import torch

    with contextlib.suppress(ImportError):
        import numpy  # noqa: F401 - numpy's state is saved whenever numpy is there
    state = saved_form(plain_rng_state())
    state["cuda"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return state


def plain_rng_state() -> tuple[Any, bytes, Any]:
    """Python's, torch's (CPU) and, when numpy is imported, numpy's global RNG states as
    plain values: a DataLoader worker sends them with every batch, inline (a tensor
    would travel through shared memory)."""
    import torch

    np = sys.modules.get("numpy")
    numpy_state = np.random.get_state() if np is not None else None
    return random.getstate(), torch.get_rng_state().numpy().tobytes(), numpy_state


def saved_form(plain: tuple[Any, bytes, Any]) -> dict[str, Any]:
    """:func:`plain_rng_state`'s values as a checkpoint holds them (tensors, no arrays)."""
    import torch

    (version, internal, gauss), torch_state, numpy_state = plain
    state: dict[str, Any] = {
        # as torch.tensor(internal) makes it (int64), from a buffer: a quarter of the time
        "python": {"version": version, "state": _int64(internal), "gauss": gauss},
        "torch": torch.frombuffer(bytearray(torch_state), dtype=torch.uint8),
        "cuda": [],
    }
    if numpy_state is not None:
        import numpy as np

        name, keys, pos, has_gauss, cached = numpy_state
        state["numpy"] = {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        }
    return state


def _int64(values: tuple[int, ...]) -> Any:
    import torch

    return torch.frombuffer(array.array("q", values), dtype=torch.int64)


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    py = state["python"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        npst = state["numpy"]
        keys = npst["keys"].numpy().astype(np.uint32)
        np.random.set_state((npst["name"], keys, npst["pos"], npst["has_gauss"], npst["cached"]))
