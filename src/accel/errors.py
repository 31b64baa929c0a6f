"""The one exception hierarchy of accel.

Everything below the CLI raises an :class:`AccelError` (or a subclass) with a message
that says what is wrong and how to fix it. The CLI entry point turns each into its
exit code in exactly one place (:func:`accel.cli.main`).
"""

from __future__ import annotations

__all__ = [
    "AccelError",
    "ConfigError",
    "IntegrityError",
    "InterruptedRun",
    "JobFailed",
    "LockTimeout",
    "UsageError",
    "WorkspaceError",
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
    """The configuration is invalid (file, line and key are in the message)."""


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
