"""Crash logs: where the traceback of an unexpected error goes, safely.

In the workspace's ``logs/`` when it is writable; otherwise in a folder of this user's
own (``$XDG_CACHE_HOME/accel/crash`` or ``~/.cache/accel/crash``, else
``<tmp>/accel-<uid>``), created 0700 and refused when it is a link or another user's.
The file has an unguessable name and is opened with ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode
0600: a link planted by someone else is never followed, a file never overwritten. A
log that cannot be written whole (a full disk) is removed, not left empty. The text is
redacted: argv and tracebacks can carry tokens.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from accel._redact import redact_argv, redact_text, scrub, secret_values
from accel.layout import CRASH_LOG_PREFIX, LOG_SUFFIX


def crash_text(version: str, argv: list[str], trace: str, env: Mapping[str, str]) -> str:
    """What a crash log holds: the version, the command and the traceback, the secret
    values of ``env`` (``ACCEL_LAUNCH_ENV``'s variables too) and ``argv`` scrubbed
    wherever they appear, then redacted (in this order: a secret with a space is then
    still found whole, as an error line finds it)."""
    from accel.env.probe import launch_env_pairs

    secrets = secret_values(env, launch_env_pairs(env) or {}, argv=argv)
    text = f"accel {version} {' '.join(redact_argv(argv))}\n{scrub(trace, secrets)}"
    return redact_text(scrub(text, secrets))


def write_crash_log(text: str, workspace_logs: Path | None, env: Mapping[str, str]) -> Path:
    """Write ``text`` to the first safe folder that takes it; OSError when none did."""
    error: OSError = OSError(errno.ENOENT, "no folder for crash logs")
    for folder in _folders(workspace_logs, env):
        try:
            return _write_new(folder, text)
        except OSError as exc:
            error = exc
    raise error


def _folders(workspace_logs: Path | None, env: Mapping[str, str]) -> Iterator[Path]:
    if workspace_logs is not None and _writable_dir(workspace_logs):
        yield workspace_logs
    for folder in _user_folders(env):
        with contextlib.suppress(OSError):
            yield _private_dir(folder)


def _user_folders(env: Mapping[str, str]) -> list[Path]:
    found = []
    cache = env.get("XDG_CACHE_HOME") or (
        str(Path(env["HOME"]) / ".cache") if env.get("HOME") else ""
    )
    if cache:
        found.append(Path(cache) / "accel" / "crash")
    found.append(Path(tempfile.gettempdir()) / f"accel-{os.getuid()}")
    return found


def _writable_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and os.access(path, os.W_OK | os.X_OK)


def _private_dir(path: Path) -> Path:
    """``path`` as a folder only this user can enter: made 0700, or checked when it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(errno.EPERM, "not a folder of this user's own", str(path))
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _write_new(folder: Path, text: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{CRASH_LOG_PREFIX}{stamp}-{os.getpid()}-{os.urandom(4).hex()}{LOG_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        data = memoryview(text.encode("utf-8", "replace"))
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
    return path
