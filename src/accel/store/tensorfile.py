"""accel's tensor file: a tree of tensors and plain values, with no pickle anywhere.

The one owner of the format: writing (:func:`save_tensor_file`), reading back only
verified (:func:`load_tensor_file`), and the outline of a file read from its header
alone (:func:`read_outline`). A payload that fails its checksum or is not well formed
becomes an :class:`~accel.errors.IntegrityError`.

Layout (little-endian)::

    b"ACCELTNS"  u64 header length  header (JSON)  zero padding to 64
    tensor 0 bytes  padding to 64  tensor 1 bytes  padding to 64  ...

The header is ``{"format": 1, "tree": ..., "tensors": [{"dtype", "shape", "offset",
"nbytes"}]}``. ``tree`` is JSON in which every object is a tag: ``{"X": i}`` tensor
``i``, ``{"D": [[key, value], ...]}`` dict, ``{"O": ...}`` OrderedDict, ``{"T": [...]}``
tuple, ``{"B": hex}`` bytes, ``{"S": [...]}`` torch.Size, ``{"Y": "float32"}`` dtype,
``{"V": "cpu"}`` device, ``{"C": [re, im]}`` complex; lists, strings, numbers, booleans
and null stand for themselves. Reading builds tensors from raw bytes and containers
from tags: nothing in the file can name code to run.

Writing, tensor bytes go straight from tensor memory to the file, hashed (xxh3-64)
piece by piece as they go, with bounded write-behind; device tensors pass through
reused host buffers (both: :mod:`accel.store._stream`).
Reading maps the file copy-on-write, hashes it in one pass and returns tensors that
are views of the mapping: no copy, and the checksum is the only pass over the data.

The outline (the tree with every tensor as a :class:`TensorRef`) needs no torch:
``accel checkpoints show`` names what a checkpoint holds (its top-level keys, the keys
of ``extra``) and ``accel checkpoints export`` finds the model in it before loading a
byte of tensor data. Nothing is verified there: the header of a file that fails its
checksum may still be read; loading is what verifies.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import mmap
import os
import struct
import sys
from collections import OrderedDict
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel._fs import open_regular, require_regular
from accel.errors import IntegrityError, PayloadMissing, UsageError, write_failed
from accel.store import _stream
from accel.store._trace import phase
from accel.store.hashing import ALGORITHM, FileDigest, new_hasher

__all__ = [
    "DTYPES",
    "FileDigest",
    "TensorRef",
    "in_memory_pieces",
    "load_tensor_file",
    "read_outline",
    "read_tree",
    "require_tensor_tree",
    "save_tensor_file",
    "tensor_tree_problem",
    "write_pieces",
    "write_tree",
]

MAGIC = b"ACCELTNS"
FORMAT = 1
ALIGN = 64
_ZEROS = bytes(ALIGN)
_MAX_HEADER = 1 << 30
# What a malformed header can make json, int(), torch.Size or torch.device raise
# (RuntimeError covers RecursionError from absurd nesting).
_DECODE_ERRORS = (ValueError, KeyError, TypeError, IndexError, RuntimeError, OverflowError)


# The dtypes whose bytes are the values (``str(dtype)`` without ``torch.``): not quantized
# ones (scale and zero point live outside the bytes; built from raw bytes, one crashed
# the reader), nor bit and sub-byte ones. One this torch lacks is refused when read.
_WIDE = ("float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32")
_INTEGER = ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool")
_NARROW = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
DTYPES = frozenset((*_WIDE, *_INTEGER, *_NARROW, "float4_e2m1fn_x2"))
_MAX_DIMS = 64
_MAX_ELEMENTS = 1 << 62  # strides and byte counts stay in int64 beyond this


def _pad(n: int) -> int:
    return -n % ALIGN


# -- encoding the tree ------------------------------------------------------------------


class _Encoder:
    def __init__(self) -> None:
        self.tensors: list[Any] = []

    def encode(self, value: Any) -> Any:
        kind = type(value)
        if value is None or kind in (bool, str):
            return value
        if isinstance(value, str):
            return str(value)
        if isinstance(value, int):  # bool is handled above, subclasses become ints
            return int(value)
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else {"F": repr(float(value))}
        if kind is list:
            return [self.encode(v) for v in value]
        if kind is tuple:
            return {"T": [self.encode(v) for v in value]}
        if kind in (dict, OrderedDict):
            items = [[self.encode(k), self.encode(v)] for k, v in value.items()]
            return {"O" if kind is OrderedDict else "D": items}
        if kind in (bytes, bytearray):
            return {"B": bytes(value).hex()}
        if kind is complex:
            return {"C": [value.real, value.imag]}
        return self._torch_leaf(value)

    def _torch_leaf(self, value: Any) -> Any:
        import torch

        if isinstance(value, torch.Tensor):
            problem = _tensor_problem(torch, value, "a tensor of the state")
            if problem:  # every writer's last check: the snapshots' too
                raise UsageError(problem)
            self.tensors.append(value.detach())
            return {"X": len(self.tensors) - 1}
        if isinstance(value, torch.Size):
            return {"S": list(value)}
        if isinstance(value, torch.dtype):
            return {"Y": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"V": str(value)}
        raise UsageError(f"cannot store a {type(value).__name__} in a tensor file")


def tensor_tree_problem(value: Any, where: str = "state") -> str | None:
    """Why ``value`` cannot be stored in a tensor file (no pickle), or None.

    Checked before anything is written, so a bad value fails the call, not the file.
    """
    if isinstance(value, (str, int, float, bool, type(None), bytes, complex)):
        return None
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            problem = tensor_tree_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                return f"{where} has the key {key!r} of type {type(key).__name__}"
            problem = tensor_tree_problem(item, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _tensor_problem(torch, value, where)
    if torch is not None and isinstance(value, (torch.Size, torch.dtype, torch.device)):
        return None
    return f"{where} is a {type(value).__module__}.{type(value).__qualname__}"


def _tensor_problem(torch: Any, value: Any, where: str) -> str | None:
    """Why the tensor ``value`` cannot be stored as its raw bytes, or None."""
    plain = type(value) in (torch.Tensor, torch.nn.Parameter)
    fast = plain and value.dtype in _storable(torch) and value.layout == torch.strided
    if fast and not value.is_nested and value.device.type != "meta":
        return None
    if not plain or value.layout != torch.strided or value.is_nested:
        return f"{where} is a {type(value).__name__}, not a plain dense tensor"
    dtype = str(value.dtype).removeprefix("torch.")
    if value.is_quantized:
        return f"{where} is a quantized tensor ({dtype}); store tensor.dequantize() instead"
    if dtype not in DTYPES:
        return f"{where} has the dtype {dtype}, which has no plain bytes to store"
    if value.device.type == "meta":
        return f"{where} is on the meta device and holds no data; materialize it first"
    return None


@functools.cache
def _storable(torch: Any) -> frozenset[Any]:
    """:data:`DTYPES` as this torch's dtype objects (a set lookup per tensor written)."""
    return frozenset(getattr(torch, name) for name in DTYPES if hasattr(torch, name))


def require_tensor_tree(value: Any, what: str) -> None:
    problem = tensor_tree_problem(value)
    if problem:
        raise UsageError(
            f"{what}: {problem}; only tensors, numbers, strings, bytes, None and "
            "dicts/lists/tuples of them can be stored (convert other objects first)"
        )


def _raw(tensor: Any) -> Any:
    """The bytes of a contiguous CPU tensor, as a writable numpy uint8 array view."""
    import torch

    return tensor.reshape(-1).view(torch.uint8).numpy()


# -- writing ----------------------------------------------------------------------------

SMALL = 64 << 10  # pieces smaller than this are gathered into one write


def save_tensor_file(obj: Any, path: Path) -> FileDigest:
    """Write ``obj`` (a tree of tensors and plain values) to a new file, fsynced."""
    try:
        size, checksum = write_tree(obj, path)
    except OSError as exc:
        raise write_failed(path, exc) from exc
    return FileDigest(size, checksum)


def write_tree(tree: Any, path: Path, *, chunk: int = _stream.CHUNK) -> tuple[int, str]:
    """Write ``tree`` to a new file at ``path``, fsynced; (size, checksum).

    Each piece is hashed right before it is written, in this thread, while the disk
    writes back the pieces before it: the bytes are then in the CPU cache for the
    write, nothing has to stay alive for another thread, and a hashing thread was no
    faster on the 2-core machine (docs/benchmarks.md). Pieces are at most ``chunk``
    bytes; small ones are gathered into one buffer first.
    """
    tensors, prefix, _ = _layout(tree)
    hasher = new_hasher()
    with open(path, "xb", buffering=0) as fh, contextlib.ExitStack() as rings:
        out = _stream.StreamWriter(fh.fileno(), chunk=chunk)
        source = _pieces(prefix, tensors, chunk, rings)
        try:
            for piece in _gathered(source):
                with phase("hash"):
                    hasher.update(piece)
                out.write(piece)
        finally:
            source.close()  # after a failed write, queued copies land before the ring is reused
        out.finish()
    return out.written, f"{ALGORITHM}:{hasher.hexdigest()}"


def write_pieces(fd: int, pieces: Iterator[memoryview]) -> int:
    """Write ``pieces`` to ``fd`` at its offset, small ones gathered; the bytes written."""
    written = 0
    for piece in _gathered(pieces):
        while piece.nbytes:
            n = os.write(fd, piece)
            written += n
            piece = piece[n:]
    return written


@contextlib.contextmanager
def in_memory_pieces(tree: Any) -> Iterator[tuple[int, Iterator[memoryview]]]:
    """``tree``'s file as its size and its bytes in order, in pieces: the bytes
    :func:`save_tensor_file` writes, neither hashed nor fsynced, for the memory tier,
    which puts them in place itself (whoever persists them hashes them while copying
    them to disk: accel.store.memtier)."""
    tensors, prefix, data = _layout(tree)
    with contextlib.ExitStack() as rings:
        source = _pieces(prefix, tensors, _stream.CHUNK, rings)
        try:
            yield len(prefix) + data, source
        finally:
            source.close()


def _layout(tree: Any) -> tuple[list[Any], bytes, int]:
    """The tensors of ``tree`` in file order, the file's bytes before the first, and the
    bytes from there to the end (the tensors, each padded)."""
    encoder = _Encoder()
    encoded = encoder.encode(tree)
    specs, offset = [], 0
    for t in encoder.tensors:
        nbytes = t.numel() * t.element_size()
        specs.append(
            {
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "offset": offset,
                "nbytes": nbytes,
            }
        )
        offset += nbytes + _pad(nbytes)
    header = json.dumps({"format": FORMAT, "tree": encoded, "tensors": specs}).encode()
    prefix = MAGIC + struct.pack("<Q", len(header)) + header
    return encoder.tensors, prefix + bytes(_pad(len(prefix))), offset


def _pieces(
    prefix: bytes, tensors: list[Any], chunk: int, rings: contextlib.ExitStack
) -> Generator[memoryview, None, None]:
    """The file's bytes in order, in pieces of at most ``chunk`` bytes.

    Contiguous CPU tensors are read in place; device tensors stay where they are and
    pass through a reused host ring (:mod:`accel.store._stream`), leased on the first
    one met: no host copy of the whole state is ever made.
    """
    yield memoryview(prefix)
    ring: _stream.Ring | None = None
    for tensor in tensors:
        t = tensor.contiguous()  # one at a time: a strided device tensor costs one copy
        nbytes = t.numel() * t.element_size()
        if nbytes and not _staged(t):
            yield from _split(memoryview(_raw(t)), chunk)
        elif nbytes:
            if ring is None:
                ring = rings.enter_context(_stream.lease(chunk, pinned=t.device.type == "cuda"))
            yield from ring.pieces(t)
        if _pad(nbytes):
            yield memoryview(_ZEROS)[: _pad(nbytes)]


def _staged(tensor: Any) -> bool:
    """Whether ``tensor`` reaches the file through a host ring (not in place)."""
    return bool(tensor.device.type != "cpu")


def _split(view: memoryview, chunk: int) -> Iterator[memoryview]:
    for start in range(0, view.nbytes, chunk):
        yield view[start : start + chunk]


def _gathered(pieces: Iterator[memoryview], size: int = 1 << 20) -> Iterator[memoryview]:
    """``pieces`` with runs of small ones joined in one reused buffer: a state of many
    small tensors costs a few writes, not two per tensor. A yielded view of the buffer
    is valid until the next one is asked for."""
    buf = bytearray(size)
    view, used = memoryview(buf), 0
    for piece in pieces:
        if used and (piece.nbytes >= SMALL or used + piece.nbytes > size):
            yield view[:used]
            used = 0
        if piece.nbytes >= SMALL:
            yield piece
        else:
            view[used : used + piece.nbytes] = piece
            used += piece.nbytes
    if used:
        yield view[:used]


# -- reading ----------------------------------------------------------------------------


def load_tensor_file(path: Path, expected: FileDigest, map_location: Any = "cpu") -> Any:
    """The tree in ``path``, verified against ``expected`` before it is returned."""
    verify_size(path, expected)
    try:
        tree, checksum = read_tree(path, expected.size, map_location)
    except FileNotFoundError:
        raise PayloadMissing(f"{path} is missing; the checkpoint or entry is damaged") from None
    if checksum != expected.checksum:
        raise IntegrityError(
            f"{path} fails its checksum ({checksum} != {expected.checksum}); it is corrupt: "
            "load another checkpoint or delete this one"
        )
    return tree


def verify_size(path: Path, expected: FileDigest) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PayloadMissing(f"{path} is missing; the checkpoint or entry is damaged") from None
    require_regular(st, path)  # a FIFO or device: refused before its size says anything
    size = st.st_size
    if size != expected.size:
        raise IntegrityError(
            f"{path} has {size} bytes, its manifest says {expected.size}; it is damaged "
            "(load another one, or delete it)"
        )


def read_tree(path: Path, size: int, map_location: Any = "cpu") -> tuple[Any, str]:
    """The tree in ``path`` (``size`` bytes long) and the checksum of the whole file.

    The file is mapped copy-on-write and hashed in full before this returns; tensors
    are views of that private mapping, so loading costs one pass over the data and no
    copy (writing to a tensor copies the page; the file never changes). The caller
    compares the checksum before using the tree. Anything that is not a well-formed
    tensor file raises :class:`IntegrityError`.

    No ``MAP_POPULATE``: on a private writable mapping it write-faults every page,
    which copies the whole file into fresh memory (measured 168 ms instead of 37 ms
    for 256 MiB in the page cache); the checksum pass faults the pages in anyway.
    """
    if size < 16:
        raise _bad(path, "it is too short to be a tensor file")
    # A link is never a payload (it could lead anywhere), a FIFO or device never one either
    # (mapping or reading it would wait or never end); the size is the one recorded, so
    # the mapping never reaches past the file's end.
    fd = open_regular(path, size=size)
    with os.fdopen(fd, "rb") as fh:
        try:
            mapped = mmap.mmap(
                fh.fileno(),
                size,
                flags=mmap.MAP_PRIVATE,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except (OSError, ValueError) as exc:
            raise _bad(path, f"it cannot be mapped ({exc})") from None
    view = memoryview(mapped)
    hasher = new_hasher()
    hasher.update(view)
    checksum = f"{ALGORITHM}:{hasher.hexdigest()}"
    specs, tree, start = _parse_header(view, path, size)
    if start + _data_end(_checked(specs, path)) != size:
        raise _bad(path, "its length does not match its header")
    tensors = [_tensor_at(mapped, start, spec) for spec in specs]
    try:
        decoded = _Decoder(tensors, path, map_location).decode(tree)
    except RecursionError:
        raise _bad(path, "its tree is nested too deeply") from None
    return decoded, checksum


def _parse_header(view: memoryview, path: Path, size: int) -> tuple[list[Any], Any, int]:
    if bytes(view[:8]) != MAGIC:
        raise _bad(path, "it is not an accel tensor file")
    (length,) = struct.unpack("<Q", view[8:16])
    if 16 + length > min(size, _MAX_HEADER):
        raise _bad(path, "its header length is impossible")
    try:
        data = json.loads(bytes(view[16 : 16 + length]))
        if data["format"] != FORMAT:
            raise _bad(path, f"it has tensor-file format {data['format']!r}; upgrade accel")
        return list(data["tensors"]), data["tree"], 16 + length + _pad(16 + length)
    except _DECODE_ERRORS:
        raise _bad(path, "its header is not valid") from None


def _checked(specs: list[Any], path: Path) -> list[Any]:
    """``specs``, each checked against what a writer makes: a dtype this torch has, at
    most 64 dimensions whose elements fit int64, the offset and bytes that follow."""
    import torch

    expected = 0
    for spec in specs:
        dtype: Any = getattr(torch, spec["dtype"], None) if _well_formed(spec) else None
        ok = isinstance(dtype, torch.dtype) and spec["offset"] == expected
        if not ok or spec["nbytes"] != math.prod(spec["shape"]) * dtype.itemsize:
            raise _bad(path, "a tensor entry of its header is not valid")
        spec["torch_dtype"] = dtype
        expected += spec["nbytes"] + _pad(spec["nbytes"])
    return specs


def _well_formed(spec: Any) -> bool:
    """Whether ``spec`` has a writer's fields and types (plain ints: no bools or floats)."""
    if type(spec) is not dict or spec.get("dtype") not in DTYPES:
        return False
    shape, offset, nbytes = spec.get("shape"), spec.get("offset"), spec.get("nbytes")
    if type(shape) is not list or len(shape) > _MAX_DIMS:
        return False
    ok = all(type(n) is int and 0 <= n < _MAX_ELEMENTS for n in (*shape, offset, nbytes))
    return ok and bool(math.prod(max(n, 1) for n in shape) < _MAX_ELEMENTS)


def _data_end(specs: list[Any]) -> int:
    return sum(s["nbytes"] + _pad(s["nbytes"]) for s in specs)


def _tensor_at(mapped: mmap.mmap, start: int, spec: dict[str, Any]) -> Any:
    import torch

    dtype, shape = spec["torch_dtype"], spec["shape"]
    if spec["nbytes"] == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(
        mapped, dtype=dtype, count=math.prod(shape), offset=start + spec["offset"]
    )
    return flat.reshape(shape)


def _bad(path: Path, why: str) -> IntegrityError:
    return IntegrityError(f"{path} was refused: {why}; it is damaged or not accel's, delete it")


class _Decoder:
    def __init__(self, tensors: list[Any], path: Path, map_location: Any) -> None:
        self.tensors = tensors
        self.path = path
        self.map_location = map_location

    def decode(self, node: Any) -> Any:
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is list:
            return [self.decode(v) for v in node]
        if type(node) is dict and len(node) == 1:
            ((tag, body),) = node.items()
            return self._tagged(tag, body)
        raise _bad(self.path, "its tree holds an unknown value")

    def _tagged(self, tag: str, body: Any) -> Any:
        try:
            if tag in ("D", "O"):
                pairs = ((self.decode(k), self.decode(v)) for k, v in body)
                return dict(pairs) if tag == "D" else OrderedDict(pairs)
            if tag == "T":
                return tuple(self.decode(v) for v in body)
            if tag == "X":
                return self._tensor(body)
            return self._scalar(tag, body)
        except _DECODE_ERRORS:
            raise _bad(self.path, f"its tree has a malformed {tag!r} value") from None

    def _tensor(self, index: int) -> Any:
        if type(index) is not int or not 0 <= index < len(self.tensors):
            raise _bad(self.path, "its tree names a tensor it does not hold")
        tensor = self.tensors[index]
        if self.map_location in (None, "cpu"):
            return tensor
        return tensor.to(self.map_location)

    def _scalar(self, tag: str, body: Any) -> Any:
        import torch

        if tag == "S":
            return torch.Size(int(n) for n in body)
        if tag == "Y" and isinstance(getattr(torch, str(body), None), torch.dtype):
            return getattr(torch, body)
        if tag == "V":
            return torch.device(str(body))
        return self._plain(tag, body)

    def _plain(self, tag: str, body: Any) -> Any:
        """The scalars that need no torch to build."""
        if tag == "F" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "B":
            return bytes.fromhex(body)
        if tag == "C":
            return complex(float(body[0]), float(body[1]))
        raise _bad(self.path, f"its tree has the unknown tag {tag!r}")


# -- the outline ------------------------------------------------------------------------


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
    if not _well_formed(spec):
        raise _bad(path, "a tensor entry of its header is not valid")
    return TensorRef(spec["dtype"], tuple(spec["shape"]))


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
        return self._plain(tag, body)
