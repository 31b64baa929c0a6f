"""The outline of a tensor file: its tree with every tensor as a :class:`TensorRef`.

Read from the header alone, through :mod:`accel.store._tensorfile`'s own parser, and
without torch: ``accel checkpoints show`` names what a checkpoint holds (its top-level
keys, the keys of ``extra``) and ``accel checkpoints export`` finds the model in it
before loading a byte of tensor data. Nothing is verified here: the header of a file
that fails its checksum may still be read; loading (:func:`accel.store._serial.
load_tensor_file`) is what verifies.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._fs import open_regular
from accel.store._tensorfile import _MAX_HEADER, _bad, _Decoder, _parse_header

__all__ = ["TensorRef", "read_outline"]


@dataclass(frozen=True)
class TensorRef:
    """A tensor of the file, as its header describes it."""

    dtype: str
    shape: tuple[int, ...]


def read_outline(path: Path) -> Any:
    """The tree of the tensor file at ``path``, tensors as :class:`TensorRef`.

    :class:`IntegrityError` when it is no well-formed tensor file (a link included).
    """
    with os.fdopen(open_regular(path), "rb") as fh:  # never a link, FIFO or device
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(16)
        length = struct.unpack("<Q", head[8:16])[0] if len(head) == 16 else 0
        head += fh.read(min(length, _MAX_HEADER, max(size - 16, 0)))
    if size < 16 or len(head) < 16:
        raise _bad(path, "it is too short to be a tensor file")
    specs, tree, _ = _parse_header(memoryview(head), path, size)
    refs = [_ref(spec, path) for spec in specs]
    try:
        return _Outline(refs, path).decode(tree)
    except RecursionError:
        raise _bad(path, "its tree is nested too deeply") from None


def _ref(spec: Any, path: Path) -> TensorRef:
    try:
        return TensorRef(str(spec["dtype"]), tuple(int(n) for n in spec["shape"]))
    except (KeyError, TypeError, ValueError):
        raise _bad(path, "a tensor entry of its header is not valid") from None


class _Outline(_Decoder):
    """The file format's own decoder, with tensors left as :class:`TensorRef` and torch's
    scalar types (``torch.Size``, dtypes, devices) as plain values, so torch is not needed."""

    def __init__(self, refs: list[TensorRef], path: Path) -> None:
        super().__init__(refs, path, None)

    def _scalar(self, tag: str, body: Any) -> Any:
        if tag == "S":
            return tuple(int(n) for n in body)
        if tag in ("Y", "V"):
            return str(body)
        if tag == "F" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "B":
            return bytes.fromhex(body)
        if tag == "C":
            return complex(float(body[0]), float(body[1]))
        raise _bad(self.path, f"its tree has the unknown tag {tag!r}")
