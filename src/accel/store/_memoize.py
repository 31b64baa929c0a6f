"""Keys for ``Cache.memoize``: a function's identity and a digest of its arguments."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any

from accel.errors import UsageError
from accel.store.hashing import digest_bytes

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_segment(text: str) -> str:
    return _UNSAFE.sub("_", text).lstrip(".")[:100] or "_"


def args_digest(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, sort_keys=True, default=_canonical)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _canonical(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value, key=repr) if not isinstance(value, tuple) else list(value)
    if isinstance(value, os.PathLike):
        return {"path": os.fspath(value)}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": digest_bytes(bytes(value))}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return {"tensor": [str(value.dtype), list(value.shape), digest_bytes(data)]}
    raise UsageError(
        f"memoize cannot key on an argument of type {type(value).__name__}; pass JSON "
        "values, tensors, bytes or paths (or give the function a `name` and hash it yourself)"
    )
