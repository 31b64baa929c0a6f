"""Every RNG's state, captured into a rank's checkpoint part and restored from it.

Tensors and plain values only (no numpy arrays), so the state loads with
``weights_only=True``: Python's state tuple becomes a tensor, numpy's keys too.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any


def rng_state() -> dict[str, Any]:
    import torch

    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": version, "state": torch.tensor(internal), "gauss": gauss},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    with contextlib.suppress(ImportError):
        import numpy as np

        raw: Any = np.random.get_state()
        name, keys, pos, has_gauss, cached = raw
        state["numpy"] = {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        }
    return state


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
