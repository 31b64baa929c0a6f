"""The worker side of hang detection: :mod:`accel._worker_hooks`, which the bootstrap
loads by path, under the name it had before it moved there (issue 26)."""

from __future__ import annotations

from accel._worker_hooks import (
    RUN_DIR_ENV,
    STACK_SIGNAL,
    crash_path,
    heartbeat,
    heartbeat_path,
    install_stack_dump_handler,
    rank_of,
    stacks_path,
)

__all__ = [
    "RUN_DIR_ENV",
    "STACK_SIGNAL",
    "crash_path",
    "heartbeat",
    "heartbeat_path",
    "install_stack_dump_handler",
    "rank_of",
    "stacks_path",
]
