"""``logs/training.log``: one line per thing the workspace did, rotated by size.

``ws.log("clean removed 3 items")`` (:meth:`accel.workspace.Workspace.log`, which calls
:func:`log_event` with the workspace's layout and ``logs`` settings) appends::

    2026-11-29T15:02:39.123+00:00 INFO pid=4242 clean: clean removed 3 items

Appends are single ``O_APPEND`` writes under ``locks/training-log.lock``, and so is the
rotation (``training.log`` -> ``.1`` -> ... -> ``.N``, at ``logs.rotate_max_bytes``,
keeping ``logs.backup_count``), so several processes never lose or tear a line. Logging
is best effort: a failure here never breaks the command that logs. Secrets are redacted.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import stat
import sys
from pathlib import Path

from accel._fs import open_regular
from accel.config.views import LogSettings
from accel.layout import LOG_LOCK, TRAINING_LOG, Layout

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
LOG_NAME = TRAINING_LOG
LOCK_NAME = LOG_LOCK
LOCK_TIMEOUT = 5.0


def log_event(
    layout: Layout,
    settings: LogSettings | None,
    message: str,
    level: str = "info",
    *,
    command: str | None = None,
) -> bool:
    """Append one line to ``layout``'s log; False when it was not written (never raises).

    ``settings``: the ``logs`` section, None when the configuration is invalid (then
    the schema's defaults). Nothing is written for a workspace that does not exist yet:
    logging never creates one.
    """
    try:
        if not _loggable(layout):
            return False
        settings = settings or _defaults()
        if LEVELS.get(level, 20) < LEVELS.get(settings.level, 20):
            return False
        line = format_line(message, level, command=command or _command())
        _append(layout, line.encode("utf-8", "replace"), settings)
        return True
    except Exception:  # noqa: BLE001 - a log line is never worth failing a command for
        return False


def format_line(
    message: str, level: str, *, command: str, now: float | None = None, pid: int | None = None
) -> str:
    """One log line (pure apart from defaults): time, level, pid, command, message."""
    from accel._redact import redact_text

    when = _dt.datetime.fromtimestamp(
        _now() if now is None else now, tz=_dt.timezone.utc
    ).isoformat(timespec="milliseconds")
    text = redact_text(" ".join(str(message).split()))
    pid = os.getpid() if pid is None else pid
    return f"{when} {level.upper()} pid={pid} {command}: {text}\n"


_LINE_RE = re.compile(  # the start of what format_line() writes
    rb"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+[+-][0-9]{2}:[0-9]{2} "
    rb"(DEBUG|INFO|WARNING|ERROR) pid=[0-9]+ "
)


def is_log_file(path: Path) -> bool:
    """True when ``path`` is a plain file that starts with a line :func:`format_line`
    wrote: what proves to ``accel clean`` that a rotated ``training.log.N`` is accel's."""
    return _LINE_RE.match(_head(path)) is not None


def is_crash_log(path: Path) -> bool:
    """True for a crash log the CLI wrote (``accel <version> <argv>`` then a traceback)."""
    return _head(path).startswith(b"accel ")


def _head(path: Path) -> bytes:
    try:
        fd = open_regular(path)
    except (OSError, ValueError):  # ValueError: a FIFO, device or link
        return b""
    try:
        return os.read(fd, 256)
    finally:
        os.close(fd)


def log_paths(logs_dir: Path, backup_count: int) -> list[Path]:
    """``training.log`` then its backups ``.1`` (newest) .. ``.N`` (oldest)."""
    return _numbered(logs_dir / LOG_NAME, backup_count)


def _numbered(base: Path, backup_count: int) -> list[Path]:
    return [base] + [base.with_name(f"{base.name}.{n}") for n in range(1, backup_count + 1)]


def _loggable(layout: Layout) -> bool:
    """Only into an accel workspace: never a folder (or data folder) accel did not make."""
    from accel.identity import identify

    return identify(layout)


def _append(layout: Layout, line: bytes, settings: LogSettings) -> None:
    from accel._fs import open_regular_append
    from accel._locks import locked

    folder = layout.logs_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOG_NAME
    max_bytes = settings.rotate_max_bytes
    with locked(layout.lock(LOCK_NAME), timeout=LOCK_TIMEOUT):
        if max_bytes > 0 and _size(path) + len(line) > max_bytes and _size(path) > 0:
            _rotate(path, settings.backup_count)
        fd = open_regular_append(path)  # a FIFO or a folder there: refused, never waited on
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _rotate(path: Path, backups: int) -> None:
    paths = _numbered(path, backups)
    if backups == 0:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(paths[0])
        return
    for older, newer in zip(reversed(paths[1:]), reversed(paths[:-1]), strict=True):
        with contextlib.suppress(FileNotFoundError):
            os.replace(newer, older)


def _defaults() -> LogSettings:
    """What an invalid configuration logs with: the schema's defaults."""
    from accel.config import schema
    from accel.config.views import Settings

    return Settings.of(schema.defaults()).logs


def _size(path: Path) -> int:
    """The size of the regular file at ``path``; 0 for anything else, which is then never
    rotated (moved aside) but refused by :func:`accel._fs.open_regular_append`."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _command() -> str:
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    if prog not in ("accel", "__main__.py"):
        return prog
    sub = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    return f"accel {sub}".strip()


def _now() -> float:
    import time

    return time.time()
