"""The file ``accel checkpoints export`` writes: one writer per format.

A writer fails with an :class:`OSError` when the disk does (a full disk, a quota): the
export turns that into its storage line. Neither library says so itself: torch's archive
writer reports a failed write as a RuntimeError naming no cause, safetensors as a
``SafetensorError`` whose message ends in ``(os error N)``.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel._version import install_extra
from accel.errors import UsageError

__all__ = ["Writer", "writer"]

Writer = Callable[[dict[str, Any], Path, dict[str, str]], None]


def writer(fmt: str) -> Writer:
    """The writer of ``fmt``; UsageError when its package is missing."""
    if fmt == "pt":
        return _save_pt
    try:
        import safetensors.torch  # noqa: F401 - the check that it is installed
    except ImportError:
        raise UsageError(
            "--format safetensors needs the safetensors package: "
            f"{install_extra('safetensors')} (or export with --format pt)"
        ) from None
    return _save_safetensors


class _Sink(io.BufferedWriter):
    """A file that remembers the OSError of a failed write: torch's archive writer turns
    it into a RuntimeError that names no cause ("unexpected pos ...")."""

    error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            self.error = exc
            raise


def _save_pt(tensors: dict[str, Any], path: Path, meta: dict[str, str]) -> None:
    import torch

    # A file object, not the path: torch names the archive inside after the file, and
    # the temp file's name is not one it accepts.
    with _Sink(io.FileIO(path, "wb")) as fh:
        try:
            torch.save(tensors, fh)
        except RuntimeError:
            if fh.error is not None:
                raise fh.error from None  # a full disk is a storage error, not torch's
            raise


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _save_safetensors(tensors: dict[str, Any], path: Path, meta: dict[str, str]) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata=meta)
    except SafetensorError as exc:
        # Its writes fail as "... I/O error: No space left on device (os error 28)".
        found = _OS_ERROR.search(str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None
    _sort_metadata(path)


def _sort_metadata(path: Path) -> None:
    """The header's ``__metadata__`` in key order, so that one checkpoint exports to the
    same bytes every time: safetensors writes it in a hash map's order, new in every save
    (safetensors#584). Rewritten in place at the same length, and only where encoding
    the header again gives back exactly what safetensors wrote; else left as it is."""
    import json

    def encode(header: dict[str, Any]) -> bytes:
        return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()

    with open(path, "r+b") as fh:
        written = fh.read(int.from_bytes(fh.read(8), "little")).rstrip(b" ")
        header = json.loads(written)
        meta = header.get("__metadata__")
        if not isinstance(meta, dict) or encode(header) != written:
            return
        header["__metadata__"] = dict(sorted(meta.items()))
        fh.seek(8)
        fh.write(encode(header))
