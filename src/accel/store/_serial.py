"""Tensor files: written with a checksum and fsync, read back only with verification.

Loading never unpickles arbitrary objects: ``torch.load(weights_only=True)`` refuses
anything but tensors and plain containers, and a payload that fails its checksum or
that torch refuses becomes an :class:`~accel.errors.IntegrityError`.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from accel.errors import AccelError, IntegrityError
from accel.store._hashing import FileHasher, HashingWriter

_SPACE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


@dataclass(frozen=True)
class FileDigest:
    size: int
    checksum: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "checksum": self.checksum}


class WriteFailed(AccelError):
    """A payload could not be written (disk full, quota, file-size limit, I/O error)."""

    exit_code = 1


def write_error(target: Path, exc: BaseException) -> WriteFailed:
    """One line saying what failed and how to fix it."""
    code = getattr(exc, "errno", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if code in _SPACE_ERRNOS or "file size" in text.lower() or "space" in text.lower():
        hint = "the disk is full or a size limit was hit; free space and retry"
    else:
        hint = "check that the disk is writable and healthy, then retry"
    return WriteFailed(f"writing {target} failed ({text}): {hint}")


def save_tensor_file(obj: Any, path: Path) -> FileDigest:
    """``torch.save`` ``obj`` to a new file at ``path``, hashed and fsynced."""
    import torch

    writer: HashingWriter | None = None
    try:
        with open(path, "xb") as fh:
            writer = HashingWriter(fh)
            torch.save(obj, cast("IO[bytes]", writer))
            fh.flush()
            os.fsync(fh.fileno())
    except (OSError, RuntimeError) as exc:
        cause = writer.error if writer is not None and writer.error is not None else exc
        raise write_error(path, cause) from exc
    return FileDigest(writer.size, writer.checksum())


def verify_size(path: Path, expected: FileDigest) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise IntegrityError(f"{path} is missing; the checkpoint or entry is damaged") from None
    if size != expected.size:
        raise IntegrityError(
            f"{path} has {size} bytes, its manifest says {expected.size}; it is damaged "
            "(load another one, or delete it)"
        )


def load_tensor_file(path: Path, expected: FileDigest, map_location: Any = "cpu") -> Any:
    """Load ``path`` with ``weights_only=True``; verify its checksum while torch parses."""
    import torch

    verify_size(path, expected)
    hasher = FileHasher(path).start()
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for bad payloads
        _verify(path, expected, hasher)
        raise IntegrityError(
            f"{path} was refused: it is not a plain tensor file ({type(exc).__name__}); "
            "accel never unpickles arbitrary objects, delete it"
        ) from None
    _verify(path, expected, hasher)
    return obj


def _verify(path: Path, expected: FileDigest, hasher: FileHasher) -> None:
    checksum, _ = hasher.result()
    if checksum != expected.checksum:
        raise IntegrityError(
            f"{path} fails its checksum ({checksum} != {expected.checksum}); it is corrupt: "
            "load another checkpoint or delete this one"
        )
