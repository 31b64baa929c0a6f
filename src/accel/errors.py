"""The one exception hierarchy of accel.

Everything below the CLI raises an :class:`AccelError` (or a subclass) with a message
that says what is wrong and how to fix it. The CLI entry point turns each into its
exit code in exactly one place (:func:`accel.cli.main`).
"""

from __future__ import annotations

import errno as _errno
import os

__all__ = [
    "AccelError",
    "CollectiveMismatch",
    "ConfigError",
    "IntegrityError",
    "InterruptedRun",
    "JobFailed",
    "LockTimeout",
    "StorageError",
    "UsageError",
    "WorkspaceError",
    "hint",
    "storage_error",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class AccelError(Exception):
    """A problem the user can act on. ``str(err)`` is the one line shown to them."""

    exit_code: int = EXIT_USAGE


class UsageError(AccelError):
    """Bad input: a flag, a key, a duration, a size, a file."""


class ConfigError(AccelError):
    """The configuration is invalid (file, line and key are in the message).

    ``key``: the dotted key at fault, when one is (so a fix can name it).
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class WorkspaceError(AccelError):
    """The workspace cannot be used as it is (missing, unwritable, newer layout)."""


class LockTimeout(AccelError):
    """A lock could not be acquired in time; the message names the lock file."""

    exit_code = EXIT_FAILED


class IntegrityError(AccelError):
    """Stored data failed verification (checksum mismatch, torn or unsafe payload)."""

    exit_code = EXIT_FAILED


class JobFailed(AccelError):
    """The job that was run failed; ``exit_code`` is what the CLI exits with."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class InterruptedRun(AccelError):
    """The job was interrupted by a signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class StorageError(AccelError, OSError):
    """The filesystem refused: a full disk, a quota or file-size limit, a read-only or
    unreadable folder, a folder replaced by a file. Also an :class:`OSError`, so code
    that handles those still does; ``errno`` and ``filename`` are the original ones."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, code: int | None = None, filename: str | None = None):
        super().__init__(message)
        self.message = message
        self.errno = code  # type: ignore[assignment]
        self.filename = filename

    def __str__(self) -> str:
        return self.message


_HINTS = {
    _errno.ENOSPC: "the disk is full: free space (`accel clean`) and retry",
    _errno.EDQUOT: "the disk quota is used up: free space (`accel clean`) or raise the quota",
    _errno.EFBIG: "a file-size limit was hit (see `ulimit -f`): raise it and retry",
    _errno.EROFS: "the filesystem is read-only: use a writable workspace (--workspace PATH)",
    # after the reason, which says "Permission denied" (or "Operation not permitted")
    _errno.EACCES: "fix the permissions or use another --workspace",
    _errno.EPERM: "fix the permissions or use another --workspace",
    _errno.ENOTDIR: "a part of that path is a file where a folder belongs: move it away",
    _errno.EEXIST: "a file is in the way where a folder belongs: move it away",
    _errno.EISDIR: "a folder is in the way where a file belongs: move it away",
    _errno.ELOOP: "a link is in the way: accel does not follow links there; remove it",
    _errno.EIO: "the disk reported an I/O error: check its health",
}


_DEFAULT_HINT = "check that the disk is writable and healthy, then retry"
# A connection's errors (a remote's backend opens sockets); a name that does not resolve
# is a negative errno (socket.gaierror's EAI_* codes).
_NETWORK = (
    _errno.ECONNREFUSED,
    _errno.ECONNRESET,
    _errno.ECONNABORTED,
    _errno.ETIMEDOUT,
    _errno.EHOSTUNREACH,
    _errno.ENETUNREACH,
    _errno.ENETDOWN,
)
_NETWORK_HINT = "check the URL and the network, then retry"


def unreachable(exc: BaseException) -> bool:
    """An OSError of a connection: refused, reset, timed out, or a name that does not
    resolve (what a remote's backend raises for a host it cannot reach)."""
    code = getattr(exc, "errno", None)
    return code in _NETWORK or (isinstance(code, int) and code < 0)


def storage_error(exc: OSError, action: str, path: object = None) -> OSError:
    """``exc`` as one actionable line (a :class:`StorageError`), unless it is not about the
    storage (a file that vanished stays a ``FileNotFoundError``: callers handle races)."""
    if isinstance(exc, StorageError) or exc.errno in (None, _errno.ENOENT, _errno.EINTR):
        return exc
    where = path if path is not None else exc.filename
    reason = exc.strerror or os.strerror(exc.errno)
    if where is None:  # a socket's error, or a descriptor's: there is no file to name
        return StorageError(f"{reason}; {hint(exc)}", exc.errno)
    return StorageError(f"cannot {action} {where}: {reason}; {hint(exc)}", exc.errno, str(where))


class TierFull(AccelError):
    """Shared memory cannot hold a snapshot (``checkpoints.snapshot_every``): one line,
    and the saves block instead."""

    exit_code = 2


class WriteFailed(AccelError):
    """A checkpoint or cache payload could not be written (disk full, quota, file-size
    limit, I/O error). Raised by saves instead of the ``OSError`` (or a serializer's error
    that says so), with what to do; the save left nothing behind."""

    exit_code = EXIT_FAILED


class OutputFailed(AccelError):
    """The command's standard output refused what it wrote (``> /dev/full``, a full disk
    behind a redirection): the output's problem, not the workspace's."""

    exit_code = EXIT_FAILED


def write_failed(target: object, exc: BaseException) -> WriteFailed:
    """``exc``, met writing ``target``, as one line: what failed and how to fix it. The
    same hints as :func:`storage_error`; a serializer's error that names no errno but
    says it ran out of space or hit a size limit gets the full disk's."""
    code = getattr(exc, "errno", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, OSError) and code is not None and exc.strerror:
        text = exc.strerror
    return WriteFailed(f"cannot write {target}: {text}; {hint(exc)}")


def hint(exc: BaseException) -> str:
    """What to do about an OSError (or a message naming its cause), in a few words."""
    code = getattr(exc, "errno", None)
    if code in _HINTS:
        return _HINTS[code]
    if unreachable(exc):
        return _NETWORK_HINT
    text = str(exc).lower()
    if "file size" in text:
        return _HINTS[_errno.EFBIG]
    if "space" in text:
        return _HINTS[_errno.ENOSPC]
    return _DEFAULT_HINT


class DoesNotFit(UsageError):
    """A checkpoint's (verified) state has other keys or shapes than what loads it:
    another model saved it, or this model's definition changed. Not damage."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """A library's exception (torch's key lists run over many lines) as one line."""
    detail = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return detail[: limit - 3] + "..." if len(detail) > limit else detail or type(exc).__name__


class NotAWorkspace(WorkspaceError):
    """A folder (or a relocated data folder) that accel did not make: never written to."""


class DamagedFile(IntegrityError, ValueError):
    """A file of accel's is not what accel writes: not a regular file, larger than any
    such file, not the size its record says, not JSON, or nested or numbered beyond any
    record. An :class:`IntegrityError` (one line, exit 1), and a ``ValueError`` for the
    readers that already treat undecodable records as absent. ``why``: the reason alone
    ("is a FIFO, not a regular file"); ``fix``: what to do, moving it aside unless said."""

    def __init__(self, path: object, why: str, fix: str = "move it aside") -> None:
        super().__init__(f"{path} {why}; {fix}")
        self.why = why


def unreadable(path: object, exc: OSError) -> DamagedFile:
    """``path`` could not be opened or read: a file another user's umask or accel's 0640
    keeps from this one is not damaged, so only an error of the file is told to move it."""
    why = f"cannot be read ({exc.strerror or exc})"
    if exc.errno in (_errno.EACCES, _errno.EPERM):
        return DamagedFile(path, why, "read it as its owner or its group, or fix its permissions")
    return DamagedFile(path, why)


class PayloadMissing(IntegrityError):
    """A payload file is not there (damaged, or replaced since its record was read)."""


class ManifestMissing(IntegrityError):
    """The folder has no ``manifest.json``: a save in progress, or not a checkpoint."""


class MetaMissing(IntegrityError):
    """The entry folder has no ``meta.json``: a put in progress, or no entry at all."""


class LeaseHeld(AccelError):
    """Another live process holds the series."""

    exit_code = EXIT_FAILED


class CollectiveMismatch(UsageError):
    """A collective (``save_state``, ``load_state``) that not every rank called in time.

    Raised in every rank that waited, naming the ranks that arrived.
    """

    exit_code = EXIT_FAILED
