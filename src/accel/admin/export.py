"""``accel checkpoints export``: a checkpoint's model weights as one safetensors or
``torch.save`` file, for the Hugging Face Hub and any tool that loads state dicts.

Order: the request is checked (format, output path, safetensors installed) before
anything is read; every file of the checkpoint is verified; the model is found in
the header alone (:mod:`accel.admin._model` says how); only then are its tensors
loaded and written. The output is written to a temp file beside it, fsynced, and
moved into place: a reader never sees half a file, and without ``force`` an existing
file is never replaced (the final step is a hard link, which refuses to overwrite).

Sharded checkpoints (``sharded/``, written by ``torch.distributed.checkpoint``) are
consolidated in this process: the DCP metadata is read once and checked (accel's
restricted unpickler, then every entry), and that object is what DCP gets; full-size
tensors are allocated for the model's entries and DCP's own loader fills them (through
:mod:`accel.store.sharded`, which refuses unsafe pickles). The model is looked for in
the sharded state first, then in ``state.tensors``.

Tensors that share memory (tied weights) are written as separate copies: every name
loads with ``safetensors.torch.load_file`` and ``torch.load(weights_only=True)``.
This module imports torch and safetensors inside its functions; nothing else of
``accel checkpoints`` does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel import _faults
from accel._fs import TMP_PREFIX, file_mode, fsync_dir
from accel.admin import _dcp, _model
from accel.admin._reading import read_checkpoint, removed
from accel.admin._writers import writer
from accel.admin.progress import SILENT, Progress
from accel.admin.verify import VerifyTargets, verify
from accel.errors import IntegrityError, UsageError, storage_error
from accel.layout import SHARDED_DIR
from accel.store.checkpoints import STATE_TENSORS
from accel.store.hashing import fsync_file
from accel.store.series import Found
from accel.store.tensorfile import TensorRef, read_outline

if TYPE_CHECKING:
    from accel.workspace import Workspace

__all__ = ["FORMATS", "ExportRequest", "ExportResult", "export"]

FORMATS = ("safetensors", "pt")
_SUFFIXES = {".safetensors": "safetensors", ".pt": "pt", ".pth": "pt", ".bin": "pt"}
SUFFIXES = tuple(_SUFFIXES)  # the names an export's file may end in without --format
SHARDED = SHARDED_DIR  # where a sharded (FSDP) checkpoint keeps its tensors


@dataclass(frozen=True)
class ExportRequest:
    output: Path
    format: str | None = None  # None: from the output's suffix
    step: int | None = None  # None: the latest
    series: str | None = None
    model: str | None = None  # the dotted path of the model; None: found by the rules
    force: bool = False


@dataclass(frozen=True)
class ExportResult:
    source: Path
    series: str
    step: int
    output: Path
    format: str
    model: str  # the dotted path of the model in the checkpoint ("" for the whole state)
    origin: str  # "state.tensors" or "sharded"
    tensors: int
    size: int
    skipped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "series": self.series,
            "step": self.step,
            "output": str(self.output),
            "format": self.format,
            "model": self.model,
            "origin": self.origin,
            "tensors": self.tensors,
            "size": self.size,
            "skipped": list(self.skipped),
        }


@dataclass(frozen=True)
class _Source:
    origin: str
    path: _model.Path_
    names: dict[str, Any]  # exported name -> outline leaf
    skipped: tuple[str, ...]
    sharded: _dcp.Sharded | None  # the checked DCP metadata, read once


def export(ws: Workspace, request: ExportRequest, progress: Progress = SILENT) -> ExportResult:
    refuse_inside(ws, request.output)
    output = check_output(request.output, request.force)
    fmt = check_format(request.format, output)
    where = None if request.model is None else _model.parse_path(request.model)
    write = writer(fmt)

    def read(found: Found) -> tuple[Found, _Source, dict[str, Any]]:
        _verified(found, progress)
        source = _locate(found, where, request.model)
        progress.stage("loading", None)
        return found, source, _load(found, source)

    # Under the series' readers lock: retention keeps the checkpoint until it is loaded.
    found, source, tensors = read_checkpoint(ws, request.step, request.series, read)
    progress.stage(f"writing {output.name}", None)
    m = found.manifest
    meta = {"format": "pt", "accel_series": m.series, "accel_step": str(m.step)}
    _write_atomically(output, lambda tmp: write(_independent(tensors), tmp, meta), request.force)
    return ExportResult(
        source=found.path,
        series=m.series,
        step=m.step,
        output=output,
        format=fmt,
        model=".".join(str(p) for p in source.path),
        origin=source.origin,
        tensors=len(tensors),
        size=os.stat(output).st_size,
        skipped=source.skipped,
    )


# -- the request ------------------------------------------------------------------------------


def check_format(fmt: str | None, output: Path) -> str:
    if fmt is None:
        found = _SUFFIXES.get(output.suffix.lower())
        if found is None:
            raise UsageError(
                f"cannot tell the format from {output.name!r}: pass --format safetensors or "
                "--format pt (or name the file *.safetensors or *.pt)"
            )
        return found
    if fmt not in FORMATS:
        raise UsageError(f"invalid --format {fmt!r}: use safetensors or pt")
    return fmt


def check_output(output: Path, force: bool) -> Path:
    """The absolute output path; UsageError for a folder, a missing folder, an existing
    file without ``force``, or anything but a regular file (or a link to one) with it:
    ``--force`` never replaces a device, a FIFO, a socket or a dangling link."""
    if str(output) == "-":  # the shell's "standard output": not a file name
        raise UsageError("--output - (stdout) is not supported: give a file name")
    path = Path(os.path.abspath(os.path.expanduser(output)))
    if os.path.isdir(path):
        raise UsageError(f"{path} is a folder: give a file name, e.g. {path / 'model.safetensors'}")
    if not os.path.isdir(path.parent):
        raise UsageError(f"the folder {path.parent} does not exist: create it first")
    if os.path.lexists(path):
        what = _not_a_file(path)  # first: --force would not help (/dev/null, a FIFO)
        if what is not None:
            raise UsageError(
                f"{path} is {what}, not a regular file: --force replaces only a file; "
                "give another --output"
            )
        if not force:
            raise UsageError(f"{path} exists: pass --force to replace it")
    return path


def refuse_inside(ws: Workspace, output: Path) -> None:
    """UsageError when ``output`` would be written in the workspace (its root or its
    relocated data folder), the links to its folder resolved: every file there is
    accel's, and a checkpoint or ``state.bin`` an export replaced would be lost. (A link
    named as the output is replaced itself, never its target.)"""
    path = os.path.abspath(os.path.expanduser(output))  # the path check_output gives
    real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    for folder in dict.fromkeys(os.path.realpath(p) for p in (ws.path, ws.data_path)):
        if os.path.commonpath([folder, real]) == folder:
            raise UsageError(
                f"--output {output} is inside the workspace ({folder}), whose files are "
                "accel's: write the export outside it, e.g. in the project folder"
            )


_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file (a link is judged by its target)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a link to nothing"
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "something else")


# -- the checkpoint ---------------------------------------------------------------------------


def _verified(found: Found, progress: Progress) -> None:
    report = verify(VerifyTargets((found,)), progress)
    for checked in report.checks:
        if checked.vanished:
            raise UsageError(removed(found))
        for problem in checked.problems:
            raise IntegrityError(
                f"{found.path / problem.file} {problem.problem}: checkpoint "
                f"{found.manifest.series}/step {found.manifest.step} is corrupt; nothing exported"
            )


def _locate(found: Found, where: tuple[str, ...] | None, asked: str | None) -> _Source:
    """Where the model is: the sharded state first (FSDP saves it there), then the state."""
    outlines: list[tuple[str, Any]] = []
    sharded = None
    if any(name.startswith(f"{SHARDED}/") for name in found.manifest.files):
        sharded = _dcp.read(found.path / SHARDED, found.manifest.files)
        outlines.append((SHARDED, _dcp.outline(sharded)))
    if STATE_TENSORS in found.manifest.files:
        outlines.append((STATE_TENSORS, read_outline(found.path / STATE_TENSORS)))
    for origin, tree in outlines:
        path = _model.find_model(tree, _is_ref, where)
        if path is not None:
            names, skipped = _model.flatten(_model.subtree(tree, path), _is_ref)
            return _Source(origin, path, names, skipped, sharded)
    name = f"checkpoint {found.manifest.series}/step {found.manifest.step}"
    what = _model.top_level(outlines[-1][1]) if outlines else "it holds no state"
    if asked is not None:
        raise UsageError(f"--model {asked!r} names no tensors in {name}: {what}")
    raise UsageError(
        f"cannot tell which part of {name} is the model ({what}); "
        "pass --model, e.g. --model model (see docs/commands/checkpoints.md)"
    )


def _is_ref(value: Any) -> bool:
    return isinstance(value, (TensorRef, _dcp.ShardRef))


def _load(found: Found, source: _Source) -> dict[str, Any]:
    if source.sharded is not None and source.origin == SHARDED:
        return _dcp.load(source.sharded, source.names)
    import torch

    from accel.store.tensorfile import load_tensor_file

    state = load_tensor_file(found.path / STATE_TENSORS, found.manifest.files[STATE_TENSORS])
    tensors, _ = _model.flatten(_model.subtree(state, source.path), torch.is_tensor)
    return tensors


def _independent(tensors: dict[str, Any]) -> dict[str, Any]:
    """Every tensor contiguous and alone in its memory: safetensors refuses shared
    storage, and torch.save would write a whole shared buffer for a small view."""
    seen: set[tuple[str, int]] = set()
    out = {}
    for name, tensor in tensors.items():
        t = tensor.detach()
        storage = t.untyped_storage()
        where = (t.device.type, storage.data_ptr())
        whole = t.is_contiguous() and t.storage_offset() == 0
        if where in seen or not whole or storage.nbytes() != t.numel() * t.element_size():
            t = t.clone().contiguous()
            where = (t.device.type, t.untyped_storage().data_ptr())
        if t.numel():
            seen.add(where)
        out[name] = t
    return out


def _write_atomically(output: Path, write: Callable[[Path], None], force: bool) -> None:
    """``write(tmp)`` beside ``output``, fsync, then into place: replaced with ``force``,
    else linked (a link never overwrites: a file that appeared meanwhile stays)."""
    try:
        fd, name = tempfile.mkstemp(prefix=TMP_PREFIX, dir=output.parent)
    except OSError as exc:
        raise storage_error(exc, "write", output) from None
    tmp = Path(name)
    try:
        os.close(fd)
        _faults.point("export.temp-created")
        write(tmp)
        os.chmod(tmp, file_mode())  # mkstemp made it 0600 (and a writer may replace it)
        fsync_file(tmp)
        _faults.point("export.written")
        _publish(tmp, output, force)
        _faults.point("export.published")
        fsync_dir(output.parent)
    except OSError as exc:
        raise storage_error(exc, "write", output) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _publish(tmp: Path, output: Path, force: bool) -> None:
    if force:
        check_output(output, force)  # again: what is there now is what gets replaced
        os.replace(tmp, output)
        return
    try:
        os.link(tmp, output)
    except FileExistsError:
        raise UsageError(f"{output} exists: pass --force to replace it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(output):  # a filesystem without hard links: check, then rename
            raise UsageError(f"{output} exists: pass --force to replace it") from None
        os.replace(tmp, output)
